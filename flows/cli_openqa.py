"""`realm finetune` and `realm evaluate`: the open-QA commands of the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli import (
    ConfigFile,
    Nproc,
    Overrides,
    Preset,
    Root,
    _blocks,
    _errors,
    _pretrain_retriever,
    _report,
    _setup,
    _warm_start,
    app,
    out,
    relaunch_under_torchrun,
)
from flows.progress_bar import RichProgress
from realm_core.artifacts import ArtifactStore
from realm_core.config import PipelineConfig


def _qa_entries(cfg: PipelineConfig, store: ArtifactStore, systems: list[str]) -> tuple[Any, Any, list[Any]]:
    """(blocks, questions, [(system, fine-tuned model or None)]) for the named systems, every
    upstream stage through the cache (trained first where missing). Under torchrun the
    single-process stages run on rank 0 first; pretraining and fine-tuning run on every rank."""
    from realm_core.distributed import Placement, rank_zero_first
    from realm_core.openqa.qa_stage import baseline_reader, qa_systems, run_finetune
    from realm_core.openqa.stage import run_load_questions
    from realm_core.pretrain.stage import run_pretrain, run_warm_reader
    from realm_core.progress import NoProgress
    from realm_core.spans.mining import run_mine_spans

    placement = Placement.from_env(cfg.finetune.device, cfg.finetune.precision)
    dense = bool({"ict", "realm"} & set(systems))
    with rank_zero_first(placement):  # only what the named systems need
        blocks, retriever = _warm_start(cfg, store) if dense else (_blocks(cfg, store), None)
        warm = run_warm_reader(store, blocks.ref, cfg.pretrain, progress=RichProgress()) \
            if "realm" in systems or cfg.finetune.reader_start == "reader_mlm" else None
        reader = baseline_reader(warm.ref if warm is not None else None, cfg.pretrain, cfg.finetune)
        spans = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress()) if "realm" in systems else None
        start = _pretrain_retriever(cfg, store, blocks, spans) if spans is not None else None
        questions = run_load_questions(store, cfg.questions)
    realm_ref = None
    if spans is not None:
        realm_ref = run_pretrain(store, blocks.ref, spans.ref, start, cfg.pretrain, cfg.masking, cfg.embed,
                                 cfg.index, RichProgress() if placement.is_main else NoProgress()).ref
    entries: list[tuple[Any, Any]] = []
    for system in qa_systems(retriever.ref if retriever is not None else None, realm_ref, cfg.embed, reader):
        if system.key not in systems:
            continue
        if system.retrieval == "none":
            entries.append((system, None))
            continue
        result = run_finetune(store, blocks.ref, questions.ref, system, cfg.finetune,
                              RichProgress() if placement.is_main else NoProgress())
        if placement.is_main:
            _report(f"fine-tuned {system.name}", result.ref, result.cached, result.stats)
        entries.append((system, result.ref))
    return blocks, questions, entries


Systems = Annotated[list[str] | None, typer.Option(
    "--system", help="none (null block only), bm25, ict (ORQA-like), realm; repeatable [default: all]")]


def _systems(chosen: list[str] | None) -> list[str]:
    from realm_core.openqa.qa_stage import SYSTEM_KEYS, check_system_keys

    return check_system_keys(list(chosen or SYSTEM_KEYS))


@app.command()
def finetune(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, system: Systems = None,
             dataset: Annotated[str | None, typer.Option(
                 help="questions dataset to train on (default: finetune.dataset, squad-open)")] = None,
             nproc: Nproc = 1) -> None:
    """questions + blocks + retriever -> [bold]fine-tuned open-QA system[/] (REALM §3.4): the document encoder and its index frozen, the query encoder and the span reader trained on the top-5 blocks, p(y|x) marginalised over every matching span. Each system gets the same budget. Killed runs resume from their last checkpoint when rerun.

    Example: realm finetune --system ict --system realm --set finetune.steps=300

    Data parallel: realm finetune --nproc 2 (or torchrun ... -m flows.cli finetune)"""
    relaunch_under_torchrun(nproc)
    with _errors():
        sets = list(overrides or []) + ([f"finetune.dataset={dataset}"] if dataset else [])
        cfg, store = _setup(preset, config, sets, root)
        _qa_entries(cfg, store, [s for s in _systems(system) if s != "none"])
        from realm_core.distributed import Placement

        Placement.from_env(cfg.finetune.device).close()


@app.command()
def evaluate(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, system: Systems = None,
             json_out: Annotated[Path | None, typer.Option(
                 "--json", help="also write the results as JSON here")] = None) -> None:
    """Open-QA exact match of each system on NQ, WebQuestions, CuratedTREC and SQuAD-open (REALM Table 1): full split and answerable subset, recall@5, a predictions table to inspect. Fine-tunes what is not cached.

    Example: realm evaluate --preset demo --json work/reports/openqa.json"""
    from realm_core.openqa.evaluation import run_evaluate_openqa

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        blocks, questions, entries = _qa_entries(cfg, store, _systems(system))
        result = run_evaluate_openqa(store, blocks.ref, questions.ref, entries, cfg.finetune,
                                     cfg.openqa_eval, RichProgress())
        _report("open-QA evaluation", result.ref, result.cached, {})
        out.print(result.report)
        if json_out is not None:
            manifest = store.open(result.ref).manifest
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps({"preset": preset, "artifact": result.ref.path,
                                            "results": manifest["results"], "systems": manifest["systems"],
                                            "budget": manifest["budget"], "temperatures": manifest["temperatures"],
                                            "gold_reader": manifest["gold_reader"],
                                            "finetune": manifest["finetune"]}, indent=2) + "\n")
