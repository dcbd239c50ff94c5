"""`realm questions`, `realm finetune`, `realm evaluate`: the open-QA stages."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flows.cli.common import (
    ConfigFile,
    Force,
    JsonOut,
    Nproc,
    Overrides,
    Preset,
    Root,
    app,
    close_process_group,
    errors,
    out,
    peak_rss_gb,
    relaunch_under_torchrun,
    report,
    resolver,
    write_json,
)
from realm_core.systems import SYSTEMS

if TYPE_CHECKING:
    from realm_core.graph.resolver import StageRun
    from realm_core.store.artifacts import Artifact

Systems = Annotated[list[str] | None, typer.Option(
    "--system", help="; ".join(f"{s.key} ({s.name})" for s in SYSTEMS) + "; repeatable [default: "
                     "openqa_eval.systems: " + ", ".join(s.key for s in SYSTEMS if s.default_row) + "]")]


def system_overrides(overrides: list[str] | None, systems: list[str] | None) -> list[str]:
    """--set items plus --system as openqa_eval.systems (an unknown name is an error naming the
    known ones)."""
    from realm_core.systems import check_system_keys

    if not systems:
        return list(overrides or [])
    return list(overrides or []) + [f"openqa_eval.systems={json.dumps(check_system_keys(list(systems)))}"]


@app.command()
def questions(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
              root: Root = None) -> None:
    """Open-QA benchmarks -> one [bold]questions[/] table: NQ-open, WebQuestions, CuratedTREC (answer regexes), SQuAD-open split by article; every dropped line counted by reason.

    Example: realm questions --preset demo"""
    with errors():
        run = resolver(preset, config, overrides, root).run("questions")
        report("questions", run)
        out.print(run.report)


@app.command()
def finetune(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, force: Force = False, system: Systems = None,
             dataset: Annotated[str | None, typer.Option(
                 help="questions dataset to train on (default: finetune.dataset, squad-open)")] = None,
             phase: Annotated[str, typer.Option(
                 help="gold: the span readers on each question's own paragraph (stages gold_reader*); open: "
                      "each system on its own top-k blocks (finetune_*, after its gold phase); both. --force "
                      "recomputes the phases named")] = "both",
             nproc: Nproc = 1) -> None:
    """questions + blocks + retriever -> [bold]fine-tuned open-QA system[/] (REALM §3.4) in two phases: the span reader reads each train question's own paragraph, then the reader and the query encoder train on the system's own top-5 blocks (the document encoder and its index frozen), p(y|x) marginalised over every matching span. Each system gets the same budget. Killed runs resume from their last checkpoint when rerun.

    The first phase is finetune.gold_passage (DPR's reader phase, the best of its dev evaluations kept; one reader per reader start, shared by the systems); the second runs finetune.steps (0: none; the demo preset runs none), and finetune.train_query_encoder=false keeps the retriever as warm-started.

    Example: realm finetune --system ict --system realm --set finetune.steps=300; the gold phase again:
    realm finetune --phase gold --force

    Data parallel: realm finetune --nproc 2 (or torchrun ... -m flows.cli finetune)"""
    from realm_core.errors import ConfigError
    from realm_core.graph.stages import finetune_targets, stage

    phases = {"gold": ("gold",), "open": ("open",), "both": ("gold", "open")}
    relaunch_under_torchrun(nproc)
    with errors():
        if phase not in phases:
            raise ConfigError(f"--phase {phase}: expected gold, open or both")
        sets = system_overrides(overrides, system) + ([f"finetune.dataset={dataset}"] if dataset else [])
        stages = resolver(preset, config, sets, root)
        targets = finetune_targets(stages.cfg, phases[phase])
        stages.force = set(targets) if force else set()
        for name in targets:
            report(stage(name).title, stages.run(name))
        close_process_group(stages.cfg.finetune.device)


@app.command()
def evaluate(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, force: Force = False, system: Systems = None, json_out: JsonOut = None) -> None:
    """Open-QA exact match of each system on NQ, WebQuestions, CuratedTREC and SQuAD-open (REALM Table 1): full split and answerable subset, recall@5, a predictions table to inspect. Fine-tunes what is not cached.

    The --json file also keeps each question's outcome per system, so that two runs pair question by question (python experiments/paired_runs.py A.json B.json --name NAME) after their artifacts are gone.

    Example: realm evaluate --preset demo --json work/reports/openqa.json"""
    with errors():
        stages = resolver(preset, config, system_overrides(overrides, system), root,
                          force=["openqa_eval"] if force else [])
        run = stages.run("openqa_eval")
        from realm_core.systems import SYSTEM_NAMES

        for name, upstream in stages.runs.items():
            if name.startswith("finetune_"):
                report(f"fine-tuned {SYSTEM_NAMES[name.removeprefix('finetune_')]}", upstream)
        report("open-QA evaluation", run)
        out.print(run.report)
        assert run.ref is not None
        artifact = stages.store.open(run.ref)
        m = artifact.manifest
        write_json(json_out, {"preset": preset, "artifact": run.ref.path} | {
            k: m[k] for k in ("results", "systems", "budget", "temperatures", "gold_reader", "finetune", "stats")}
            | warm_start_record(stages.runs) | {"peak_rss_gb": peak_memory(stages.runs)}
            | ({"outcomes": question_outcomes(artifact)} if json_out else {}))


def question_outcomes(artifact: Artifact) -> dict[str, dict[str, Any]]:
    """dataset -> each question's outcome per system, so that the file pairs with another run
    question by question (experiments/paired_runs.py) after the artifact is gone."""
    from realm_core.openqa import outcomes

    rows = artifact.read_table("openqa_predictions", ["dataset", "system", "qid", "correct"]).to_pylist()
    return {d: outcomes.encode(outcomes.from_predictions(rows, d)) for d in sorted({r["dataset"] for r in rows})}


def peak_memory(runs: dict[str, StageRun]) -> dict[str, float] | None:
    """This process's peak memory where it did some of the work; None where every stage was a
    cache hit, since then it measured only the loading (the run that did the work measured its own)."""
    return None if all(r.cached for r in runs.values()) else peak_rss_gb()


WARM_STARTS = ("ict", "retromae")


def warm_start_record(runs: dict[str, StageRun]) -> dict[str, dict[str, dict[str, Any]]]:
    """What README quotes of a run's retriever warm starts beside its results: each one's stats
    (steps, batch, train seconds) and the config it trained with (block length, micro-batch...),
    as the stage resolved it in this process, so a reader of the file need not open the artifacts."""
    used = {name: r for name, r in runs.items() if name in WARM_STARTS and r.ref is not None}
    return {"warm_starts": {name: r.stats for name, r in used.items()},
            "warm_start_configs": {name: r.config[name] for name, r in used.items()}}
