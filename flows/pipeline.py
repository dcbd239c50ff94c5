"""The full pipeline: the flow `realm`, deployed as realm/full-pipeline. Stages run as subflows
and pass artifact references (path + content hash), never data."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from prefect import Flow, flow
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)

from flows import stages as sf
from flows.settings import ConfigFile, Dask, Force, Overrides, Preset, Root, described, resolve
from realm_core.config import PROJECT_DIR
from realm_core.graph.resolver import StageRun
from realm_core.graph.stages import PIPELINE_TARGETS, STAGES, closure
from realm_core.progress import PipelineEta
from realm_core.store.artifacts import ArtifactStore

# each stage flow by its name; which stages each owns is declared in the graph (`Stage.flow`), and
# a stage with no flow (the reader's warm-ups, the questions, the null-only run)
# resolves as a task inside the first flow that needs it
FLOWS: dict[str, Flow[..., dict[str, StageRun]]] = sf.FLOWS
FLOW_OF = {s.name: FLOWS[s.flow] for s in STAGES if s.flow is not None}
# the flows that take `dask`: their own signature says so
FANS_OUT = {name for name, f in FLOWS.items() if "dask" in f.parameters.properties}


def summary_markdown(preset: str, stages: dict[str, StageRun]) -> str:
    lines = [f"# realm pipeline ({preset})", "",
             "| stage | cache | seconds | artifact |", "|---|---|---|---|"]
    for name, r in stages.items():
        lines.append(f"| {name} | {'hit' if r.cached else 'computed'} | {r.seconds:.1f} | "
                     f"`{r.ref.path if r.ref else 'off'}` |")
    return "\n".join(lines)


def shipped_seconds(preset: str) -> dict[str, float]:
    """Each stage's seconds in the project's own record of a run of `preset` (bench/results/<preset>.json,
    where one is committed): what a fresh store's progress line estimates from."""
    path = PROJECT_DIR / "bench" / "results" / f"{preset}.json"
    try:
        stages = json.loads(path.read_text()).get("stages", {})
        return {k: float(v) for k, v in stages.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


@flow(name="realm", log_prints=True)
@described
def full_pipeline(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                  root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, Any]:
    """Every stage of the graph on one config, each stage flow a subflow in graph order. Each
    stage is cached on its inputs' content hashes plus its config, so a rerun recomputes only
    what changed downstream. `dask` (local:N or a scheduler address) fans ingestion, span
    mining and block embedding out over Dask workers; `force` recomputes every stage."""
    cfg, root = resolve(preset, config_file, overrides, root)
    print(f"config: {cfg.model_dump_json()}")
    plan = closure(cfg, PIPELINE_TARGETS)
    reports = Path(root).parent / "reports" if "://" not in root else None
    # one line for the whole run: stages done, elapsed, and the rest at their last computed times
    eta = PipelineEta(list(plan), reports / f"stage-seconds-{preset}.json" if reports else None,
                      shipped_seconds(preset))
    bar = cast(UUID, create_progress_artifact(progress=0.0, key="realm-pipeline-progress",
                                   description=f"realm pipeline ({preset}): {eta.line()}"))  # sync inside a sync flow
    runs: dict[str, StageRun] = {}
    for name in plan:
        stage_flow = FLOW_OF.get(name)
        if name in runs or stage_flow is None:
            continue
        extra = {"dask": dask} if stage_flow.name in FANS_OUT else {}
        for resolved, run in stage_flow(preset=preset, config_file=config_file, overrides=overrides,
                                        root=root, force=force, **extra).items():
            runs.setdefault(resolved, run)  # where it was computed, not a later cache hit
            eta.record(resolved, run.ref is not None and not run.cached, run.seconds)
        print(eta.line())
        update_progress_artifact(artifact_id=bar, progress=round(100 * eta.fraction(), 1),
                                 description=f"realm pipeline ({preset}): {eta.line()}")
    ordered = {name: runs[name] for name in plan if name in runs}
    if reports is not None and cfg.gain.enabled and ordered.get("openqa_eval") and ordered["openqa_eval"].ref:
        from flows.record import run_record, stage_seconds

        record = run_record(cfg, ArtifactStore(root), stage_seconds(reports, preset))
        (reports / f"record-{preset}.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"the run's record: {reports / f'record-{preset}.json'} (`realm record` writes it again)")
    md = summary_markdown(preset, ordered)
    create_markdown_artifact(markdown=md, key="realm-pipeline", description="stage summary")
    md += "".join(f"\n\n## {name}\n\n{r.report}" for name, r in ordered.items() if r.report)
    report_path = None
    if reports is not None:
        reports.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        report_path = reports / f"pipeline-{preset}-{stamp}.md"
        report_path.write_text(md + "\n")
    return {"preset": preset, "root": root, "report": str(report_path) if report_path else None,
            "stages": {k: v.summary() for k, v in ordered.items()}}
