"""Thin task over REALM pretraining."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import EmbedConfig, IndexConfig, MaskingConfig, PretrainConfig
from realm_core.pretrain.stage import RefreshIndex, run_pretrain, run_warm_reader
from tasks.reporting import run_stage


@task(name="pretrain-realm")
def pretrain_realm(blocks: ArtifactRef, spans: ArtifactRef, retriever: ArtifactRef | None,
                   config: PretrainConfig, masking: MaskingConfig, embed: EmbedConfig,
                   index: IndexConfig, root: str, refresh_index: RefreshIndex | None = None,
                   force: bool = False) -> dict[str, Any]:
    return run_stage(f"pretrain ({config.retrieval})", lambda p: run_pretrain(
        ArtifactStore(root), blocks, spans, retriever, config, masking, embed, index, p,
        force=force, refresh_index=refresh_index))


@task(name="warm-reader")
def warm_reader(blocks: ArtifactRef, config: PretrainConfig, root: str) -> dict[str, Any] | None:
    """The reader's masked-LM warm-up (cached; the one REALM pretraining starts from), or None
    when the preset has none (`pretrain.reader_mlm.steps=0`)."""
    if config.reader_mlm.steps <= 0:
        return None
    return run_stage("reader masked-LM warm-up", lambda p: run_warm_reader(ArtifactStore(root), blocks, config, progress=p))
