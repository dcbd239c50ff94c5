"""Thin tasks over the corpus stages: read refs in, call realm_core, return refs and stats."""

from __future__ import annotations

import time
from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.blocks import run_chunk
from realm_core.config import ChunkConfig, IngestConfig
from realm_core.ingest.stage import run_ingest
from tasks.reporting import publish_stage_report, run_progress


@task(name="ingest-documents", retries=1, retry_delay_seconds=5)
def ingest_documents(config: IngestConfig, root: str, force: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = run_ingest(ArtifactStore(root), config, run_progress(), force=force)
    seconds = time.perf_counter() - t0
    publish_stage_report("ingest", result.ref, result.cached, result.stats, seconds)
    return {"ref": result.ref, "cached": result.cached, "stats": result.stats, "seconds": seconds}


@task(name="chunk-blocks")
def chunk_blocks(documents: ArtifactRef, config: ChunkConfig, root: str,
                 force: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = run_chunk(ArtifactStore(root), documents, config, run_progress(), force=force)
    seconds = time.perf_counter() - t0
    publish_stage_report("chunk", result.ref, result.cached, result.stats, seconds)
    return {"ref": result.ref, "cached": result.cached, "stats": result.stats, "seconds": seconds}
