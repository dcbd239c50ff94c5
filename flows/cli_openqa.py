"""`realm finetune` and `realm evaluate`: the open-QA commands of the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli import (
    ConfigFile,
    Overrides,
    Preset,
    RichProgress,
    Root,
    _errors,
    _pretrain_retriever,
    _report,
    _setup,
    _warm_start,
    app,
    out,
)
from realm_core.artifacts import ArtifactStore
from realm_core.config import PipelineConfig


def _qa_entries(cfg: PipelineConfig, store: ArtifactStore, systems: list[str]) -> tuple[Any, Any, list[Any]]:
    """(blocks, questions, [(system, fine-tuned model or None)]) for the named systems, every
    upstream stage through the cache (trained first where missing)."""
    from realm_core.openqa.qa_stage import qa_systems, run_finetune
    from realm_core.openqa.stage import run_load_questions
    from realm_core.pretrain.stage import run_pretrain
    from realm_core.spans.mining import run_mine_spans

    blocks, retriever = _warm_start(cfg, store)
    realm_ref = None
    if "realm" in systems:
        spans = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress())
        realm_ref = run_pretrain(store, blocks.ref, spans.ref, _pretrain_retriever(cfg, store, blocks, spans),
                                 cfg.pretrain, cfg.masking, cfg.embed, cfg.index, RichProgress()).ref
    questions = run_load_questions(store, cfg.questions)
    entries: list[tuple[Any, Any]] = []
    for system in qa_systems(retriever.ref, realm_ref, cfg.embed, cfg.ict.encoder):
        if system.key not in systems:
            continue
        if system.retrieval == "none":
            entries.append((system, None))
            continue
        result = run_finetune(store, blocks.ref, questions.ref, system, cfg.finetune, RichProgress())
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
                 help="questions dataset to train on (default: finetune.dataset, squad-open)")] = None) -> None:
    """questions + blocks + retriever -> [bold]fine-tuned open-QA system[/] (REALM §3.4): the document encoder and its index frozen, the query encoder and the span reader trained on the top-5 blocks, p(y|x) marginalised over every matching span. Each system gets the same budget. Killed runs resume from their last checkpoint when rerun.

    Example: realm finetune --system ict --system realm --set finetune.steps=300"""
    with _errors():
        sets = list(overrides or []) + ([f"finetune.dataset={dataset}"] if dataset else [])
        cfg, store = _setup(preset, config, sets, root)
        _qa_entries(cfg, store, [s for s in _systems(system) if s != "none"])


@app.command()
def evaluate(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, system: Systems = None,
             json_out: Annotated[Path | None, typer.Option(
                 "--json", help="also write the results as JSON here")] = None) -> None:
    """Open-QA exact match of each system on NQ, WebQuestions, CuratedTREC and SQuAD-open (REALM Table 1): full split and answerable subset, recall@5, a predictions table to inspect. Fine-tunes what is not cached.

    Example: realm evaluate --preset demo --json work/reports/openqa.json"""
    from realm_core.openqa.qa_stage import run_evaluate_openqa

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
                                            "finetune": manifest["finetune"]}, indent=2) + "\n")
