"""Corpus stages fanned out over a Dask cluster through Prefect's Dask task runner.

`ingest-corpus-dask` is the ingest stage with one `ingest-source` task per source file (a
Wikipedia dump comes in dozens of part files): each worker streams its file and writes its
documents to the stage's scratch directory, and the stage appends them in source order as each
is done, dropping doc ids an earlier source had, so the artifact is the one-process one.

`embed-blocks-dask` is the embed-blocks stage with one `embed-shard` task per shard of block
ids: the flow's task runner (a `DaskTaskRunner`) sends them to Dask workers, each of which loads
the document encoder once and writes its shard file into the stage's scratch directory; the stage
then publishes the same artifact (same cache key, same files) as a one-process run. The workers
must see the artifact root and the scratch directory under it: one machine, or a shared
filesystem. `mine-spans-dask` does the same for salient span mining: one `mine-spans-shard`
task per `spans.shard_size` blocks, each running spaCy on its worker and writing its rows to the
scratch directory; the stage appends each shard to its tables in block order as soon as that
shard is done, so it holds one shard at a time.

    realm ingest --dask local:8                      # eight dump files at a time
    realm refresh-index --dask local:4               # a LocalCluster of 4 worker processes
    realm mine-spans --dask tcp://scheduler:8786     # an existing Dask cluster
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefect import Task, flow
from prefect_dask import DaskTaskRunner

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import EmbedConfig, IngestConfig, SpanConfig
from realm_core.errors import ConfigError
from realm_core.ingest.stage import run_ingest
from realm_core.retrieval.stage import run_embed_blocks
from realm_core.spans.mining import run_mine_spans
from tasks.corpus import ingest_source_task
from tasks.reporting import run_stage
from tasks.retrieval import embed_shard_task
from tasks.spans import mine_spans_shard


def dask_runner(address: str) -> DaskTaskRunner:
    """`local:N` starts a LocalCluster of N single-threaded worker processes (torch uses one
    core each); anything else is the address of a running Dask scheduler."""
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


def in_order(task: Task[..., dict[str, Any]], jobs: list[Any]) -> Iterator[dict[str, Any]]:
    """`task` mapped over the jobs on the flow's task runner; each result in job order, as soon as
    it is done, so the stage can write it then. A failed job raises here and fails the flow."""
    for future in task.map(jobs):
        yield future.result()


@flow(name="ingest-corpus-dask", log_prints=True)
def ingest_corpus_dask(ingest: IngestConfig, root: str, force: bool = False) -> dict[str, Any]:
    """ingest-corpus with the source files as tasks on the flow's task runner."""

    return run_stage("ingest", lambda p: run_ingest(ArtifactStore(root), ingest, p, force=force,
                                                     map_sources=lambda jobs: in_order(ingest_source_task, jobs)))


@flow(name="embed-blocks-dask", log_prints=True)
def embed_blocks_dask(blocks: ArtifactRef, embed: EmbedConfig, root: str, force: bool = False) -> dict[str, Any]:
    """embed-blocks with the shards as tasks on the flow's task runner (run it with
    `.with_options(task_runner=dask_runner(...))`)."""

    return run_stage("embed", lambda p: run_embed_blocks(ArtifactStore(root), blocks, embed, p, force=force,
                                                          map_shards=lambda jobs: list(in_order(embed_shard_task, jobs))))


@flow(name="mine-spans-dask", log_prints=True)
def mine_spans_dask(blocks: ArtifactRef, spans: SpanConfig, root: str, force: bool = False) -> dict[str, Any]:
    """mine-salient-spans with shards of blocks as tasks on the flow's task runner."""

    return run_stage("spans", lambda p: run_mine_spans(ArtifactStore(root), blocks, spans, p, force=force,
                                                        map_shards=lambda jobs: in_order(mine_spans_shard, jobs)))
