"""The flows' hook into the stage graph: each stage's runner called as a Prefect task that
publishes the stage's report (with the config it ran on) as a markdown artifact."""

from __future__ import annotations

import time
from dataclasses import replace

from prefect import task
from prefect.cache_policies import NO_CACHE

from realm_core.graph import Stage, StageInputs, StageRun, stage_run
from tasks.reporting import publish_stage_report, run_progress

RETRIES = {"ingest": 1, "index": 2}  # reading a dump, writing an index: transient I/O


@task(name="stage", cache_policy=NO_CACHE)
def stage_task(stage: Stage, inputs: StageInputs) -> StageRun:
    t0 = time.perf_counter()
    result = stage.run(replace(inputs, progress=run_progress()))
    run = stage_run(stage, inputs.cfg, result, time.perf_counter() - t0)
    publish_stage_report(stage.title, run.ref, run.cached, run.stats, run.seconds, run.report, run.config)
    return run


def prefect_hook(stage: Stage, inputs: StageInputs) -> StageRun:
    """Call a stage's runner as the task `<stage>` of the calling flow."""
    named = stage_task.with_options(name=stage.name.replace("_", "-"), retries=RETRIES.get(stage.name, 0),
                                    retry_delay_seconds=5)
    return named(stage, inputs)
