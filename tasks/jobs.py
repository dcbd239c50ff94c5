"""Units of work of the stages that fan out, as tasks a Dask task runner sends to its workers."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.ingest.stage import SourceJob, ingest_source
from realm_core.retrieval.embed import ShardJob, embed_shard
from realm_core.spans.mining import SpanShardJob, mine_shard


@task(name="ingest-source", retries=2, retry_delay_seconds=5)
def ingest_source_task(job: SourceJob) -> dict[str, Any]:
    """One source file (e.g. one part of a Wikipedia dump)."""
    return ingest_source(job)


@task(name="embed-shard", retries=2, retry_delay_seconds=5)
def embed_shard_task(job: ShardJob) -> dict[str, Any]:
    """One shard of block embeddings."""
    return embed_shard(job)


@task(name="mine-spans-shard", retries=2, retry_delay_seconds=5)
def mine_spans_shard(job: SpanShardJob) -> dict[str, Any]:
    """One shard of blocks through spaCy's NER and the date regexes."""
    return mine_shard(job)
