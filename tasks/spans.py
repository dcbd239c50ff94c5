"""Thin task over salient span mining."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import SpanConfig
from realm_core.spans.mining import SpanShardJob, mine_shard, run_mine_spans
from tasks.reporting import run_stage


@task(name="mine-salient-spans")
def mine_salient_spans(blocks: ArtifactRef, config: SpanConfig, root: str,
                       force: bool = False) -> dict[str, Any]:
    return run_stage("spans", lambda p: run_mine_spans(ArtifactStore(root), blocks, config, p,
                                                        force=force))


@task(name="mine-spans-shard", retries=2, retry_delay_seconds=5)
def mine_spans_shard(job: SpanShardJob) -> dict[str, Any]:
    """One shard of blocks mined on whichever worker the flow's task runner picks."""
    return mine_shard(job)
