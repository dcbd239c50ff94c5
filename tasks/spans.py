"""Thin task over salient span mining."""

from __future__ import annotations

import time
from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import SpanConfig
from realm_core.spans.mining import run_mine_spans
from tasks.reporting import publish_stage_report, run_progress


@task(name="mine-salient-spans")
def mine_salient_spans(blocks: ArtifactRef, config: SpanConfig, root: str,
                       force: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = run_mine_spans(ArtifactStore(root), blocks, config, run_progress(), force=force)
    seconds = time.perf_counter() - t0
    publish_stage_report("spans", result.ref, result.cached, result.stats, seconds)
    return {"ref": result.ref, "cached": result.cached, "stats": result.stats, "seconds": seconds}
