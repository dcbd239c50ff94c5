"""Thin tasks over the retrieval stages: warm start, block embeddings, index versions and the
retrieval evaluation."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import (
    EmbedConfig,
    ICTConfig,
    IndexConfig,
    RetrievalEvalConfig,
    RetroMAEConfig,
)
from realm_core.retrieval.embed import ShardJob, embed_shard
from realm_core.retrieval.evaluation import run_evaluate_retrieval, standard_systems
from realm_core.retrieval.stage import run_build_index, run_embed_blocks
from realm_core.retrieval.warm_start import run_warm_start_ict, run_warm_start_retromae
from tasks.reporting import run_stage


@task(name="embed-blocks")
def embed_blocks(blocks: ArtifactRef, config: EmbedConfig, root: str,
                 force: bool = False) -> dict[str, Any]:
    return run_stage("embed", lambda p: run_embed_blocks(ArtifactStore(root), blocks, config, p,
                                                          force=force))


@task(name="build-index", retries=2, retry_delay_seconds=10)
def build_index(embeddings: ArtifactRef, blocks: ArtifactRef, config: IndexConfig,
                root: str, index_root: str | None = None) -> dict[str, Any]:
    index_store = ArtifactStore(index_root) if index_root else None
    return run_stage("index", lambda _: run_build_index(ArtifactStore(root), embeddings, blocks,
                                                         config, index_store))


@task(name="warm-start-ict")
def warm_start_ict(blocks: ArtifactRef, spans: ArtifactRef, config: ICTConfig, root: str,
                   force: bool = False) -> dict[str, Any]:
    return run_stage("warm start (ICT)", lambda p: run_warm_start_ict(ArtifactStore(root), blocks,
                                                                       spans, config, p, force=force))


@task(name="warm-start-retromae")
def warm_start_retromae(blocks: ArtifactRef, config: RetroMAEConfig, root: str,
                        force: bool = False) -> dict[str, Any]:
    return run_stage("warm start (RetroMAE)", lambda p: run_warm_start_retromae(
        ArtifactStore(root), blocks, config, p, force=force))


@task(name="evaluate-retrieval")
def evaluate_retrieval(blocks: ArtifactRef, retriever: ArtifactRef | None, embed: EmbedConfig,
                       ict: ICTConfig, config: RetrievalEvalConfig, root: str) -> dict[str, Any]:
    systems = standard_systems(retriever, embed, ict.encoder, ict.projection_dim, ict.seed)
    return run_stage("retrieval evaluation", lambda p: run_evaluate_retrieval(
        ArtifactStore(root), blocks, systems, config, p))


@task(name="embed-shard", retries=2, retry_delay_seconds=5)
def embed_shard_task(job: ShardJob) -> dict[str, Any]:
    """One shard of block embeddings, on whichever worker the flow's task runner picks."""
    return embed_shard(job)
