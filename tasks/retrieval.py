"""Thin tasks of a pretraining run's index refresh: embed the blocks with the run's current
document encoder, then build the index version under the run's own index root."""

from __future__ import annotations

from prefect import task

from realm_core.config import EmbedConfig, IndexConfig
from realm_core.graph.resolver import StageRun
from realm_core.retrieval.stage import run_build_index, run_embed_blocks
from realm_core.store.artifacts import ArtifactRef, ArtifactStore
from tasks.reporting import reported_stage


@task(name="embed-blocks")
def embed_blocks(blocks: ArtifactRef, config: EmbedConfig, root: str) -> StageRun:
    return reported_stage("embed", "embed", lambda p: run_embed_blocks(ArtifactStore(root), blocks, config, p),
                          {"embed": config.model_dump(mode="json")})


@task(name="build-index", retries=2, retry_delay_seconds=10)
def build_index(embeddings: ArtifactRef, blocks: ArtifactRef, config: IndexConfig, root: str,
                index_root: str) -> StageRun:
    return reported_stage("index", "index",
                          lambda _: run_build_index(ArtifactStore(root), embeddings, blocks, config,
                                                    ArtifactStore(index_root)),
                          {"index": config.model_dump(mode="json")})
