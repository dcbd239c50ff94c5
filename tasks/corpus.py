"""Thin tasks over the corpus stages: read refs in, call realm_core, return refs and stats."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.blocks import run_chunk
from realm_core.config import ChunkConfig, IngestConfig
from realm_core.ingest.stage import SourceJob, ingest_source, run_ingest
from tasks.reporting import run_stage


@task(name="ingest-documents", retries=1, retry_delay_seconds=5)
def ingest_documents(config: IngestConfig, root: str, force: bool = False) -> dict[str, Any]:
    return run_stage("ingest", lambda p: run_ingest(ArtifactStore(root), config, p, force=force))


@task(name="ingest-source", retries=2, retry_delay_seconds=5)
def ingest_source_task(job: SourceJob) -> dict[str, Any]:
    """One source file (e.g. one part of a Wikipedia dump) on whichever worker the flow's task
    runner picks."""
    return ingest_source(job)


@task(name="chunk-blocks")
def chunk_blocks(documents: ArtifactRef, config: ChunkConfig, root: str,
                 force: bool = False) -> dict[str, Any]:
    return run_stage("chunk", lambda p: run_chunk(ArtifactStore(root), documents, config, p,
                                                   force=force))
