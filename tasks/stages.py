"""The flows' hook into the stage graph: each stage's runner called as a Prefect task that
publishes the stage's report (with the config it ran on) as a markdown artifact."""

from __future__ import annotations

from dataclasses import replace

from prefect import task
from prefect.cache_policies import NO_CACHE

from realm_core.graph.resolver import StageRun
from realm_core.graph.stages import Stage, StageInputs
from tasks.reporting import reported_stage

RETRIES = {"ingest": 1, "index": 2}  # reading a dump, writing an index: transient I/O


@task(name="stage", cache_policy=NO_CACHE)
def stage_task(stage: Stage, inputs: StageInputs) -> StageRun:
    return reported_stage(stage.name, stage.title, lambda progress: stage.run(replace(inputs, progress=progress)),
                          stage.config(inputs.cfg))


def prefect_hook(stage: Stage, inputs: StageInputs) -> StageRun:
    """Call a stage's runner as the task `<stage>` of the calling flow."""
    named = stage_task.with_options(name=stage.name.replace("_", "-"), retries=RETRIES.get(stage.name, 0),
                                    retry_delay_seconds=5)
    return named(stage, inputs)
