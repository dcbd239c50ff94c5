"""Thin task over REALM pretraining."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import EmbedConfig, IndexConfig, MaskingConfig, PretrainConfig
from realm_core.pretrain.stage import RefreshIndex, run_pretrain
from tasks.reporting import run_stage


@task(name="pretrain-realm")
def pretrain_realm(blocks: ArtifactRef, spans: ArtifactRef, retriever: ArtifactRef | None,
                   config: PretrainConfig, masking: MaskingConfig, embed: EmbedConfig,
                   index: IndexConfig, root: str, refresh_index: RefreshIndex | None = None,
                   force: bool = False) -> dict[str, Any]:
    return run_stage(f"pretrain ({config.retrieval})", lambda p: run_pretrain(
        ArtifactStore(root), blocks, spans, retriever, config, masking, embed, index, p,
        force=force, refresh_index=refresh_index))
