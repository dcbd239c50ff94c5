"""Corpus stages fanned out over a Dask cluster through Prefect's Dask task runner.

`fan-out` runs one stage of the graph (ingest, salient spans, embed) with its units of work as
tasks on the flow's task runner. For ingest: with one `ingest-source` task per source file (a
Wikipedia dump comes in dozens of part files): each worker streams its file and writes its
documents to the stage's scratch directory, and the stage appends them in source order as each
is done, dropping doc ids an earlier source had, so the artifact is the one-process one.

For embed: with one `embed-shard` task per shard of block
ids: the flow's task runner (a `DaskTaskRunner`) sends them to Dask workers, each of which loads
the document encoder once and writes its shard file into the stage's scratch directory; the stage
then publishes the same artifact (same cache key, same files) as a one-process run. The workers
must see the artifact root and the scratch directory under it: one machine, or a shared
filesystem. Salient span mining does the same: one `mine-spans-shard`
task per `spans.shard_size` blocks, each running spaCy on its worker and writing its rows to the
scratch directory; the stage appends each shard to its tables in block order as soon as that
shard is done, so it holds one shard at a time.

    realm ingest --dask local:8                      # eight dump files at a time
    realm refresh-index --dask local:4               # a LocalCluster of 4 worker processes
    realm mine-spans --dask tcp://scheduler:8786     # an existing Dask cluster
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prefect import Task, flow
from prefect.task_runners import TaskRunner
from prefect_dask.task_runners import DaskTaskRunner

from realm_core.config import PipelineConfig
from realm_core.errors import ConfigError
from realm_core.graph.resolver import Hook, StageRun
from realm_core.graph.stages import Stage, StageInputs, stage
from realm_core.ingest.stage import ingest_source
from realm_core.retrieval.embed import embed_shard
from realm_core.spans.mining import mine_shard
from realm_core.store.artifacts import ArtifactRef, ArtifactStore
from tasks.jobs import embed_shard_task, ingest_source_task, mine_spans_shard
from tasks.stages import stage_task

JOB_TASKS: dict[Callable[[Any], Any], Task[..., Any]] = {
    ingest_source: ingest_source_task, embed_shard: embed_shard_task, mine_shard: mine_spans_shard}


def dask_runner(address: str) -> TaskRunner[Any]:
    """`local:N` starts a LocalCluster of N single-threaded worker processes (torch uses one
    core each); anything else is the address of a running Dask scheduler. (Typed as a plain
    TaskRunner: prefect_dask subclasses the unparameterised one, whose future type then defaults
    to a thread pool's, which `Flow.with_options` does not take.)"""
    if address.startswith("local:"):
        try:
            workers = int(address.removeprefix("local:"))
        except ValueError:
            workers = 0
        if workers < 1:
            raise ConfigError(f"dask address {address!r}: expected local:N with N >= 1, or tcp://host:port")
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1,
                                              "processes": True, "dashboard_address": None})
    return DaskTaskRunner(address=address)


def in_order(job: Callable[[Any], Any], jobs: list[Any]) -> Iterator[Any]:
    """`job`'s task mapped over the jobs on the flow's task runner; each result in job order, as
    soon as it is done, so the stage can write it then. A failed job raises here and fails the flow."""
    for future in JOB_TASKS[job].map(jobs):
        yield future.result()


@flow(name="fan-out", log_prints=True)
def fan_out(stage_name: str, cfg: PipelineConfig, root: str, refs: dict[str, ArtifactRef | None],
            force: bool = False) -> StageRun:
    """One stage whose units of work (source files, shards of blocks) are tasks on this flow's
    task runner (run it with `.with_options(task_runner=dask_runner(...))`); the artifact is the
    one a single process makes."""
    inputs = StageInputs(cfg, ArtifactStore(root), refs, force=force, map_jobs=in_order)
    return stage_task(stage(stage_name), inputs)


def dask_hook(address: str | None, hook: Hook) -> Hook:
    """`hook`, except that a stage that fans out runs as a `fan-out` subflow on Dask workers
    when an address (local:N or a scheduler's) is given."""
    if not address:
        return hook
    runner = dask_runner(address)  # a bad address fails before any stage runs

    def on_dask(s: Stage, inputs: StageInputs) -> StageRun:
        if not s.fans_out:
            return hook(s, inputs)
        return fan_out.with_options(task_runner=runner, name=f"fan-out-{s.name}")(
            s.name, inputs.cfg, inputs.store.url, inputs.refs, inputs.force)
    return on_dask
