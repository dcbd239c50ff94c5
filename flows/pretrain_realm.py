"""Stage flow: REALM pretraining (Guu et al. 2020 §3), with every index refresh a
`refresh-index` subflow run (it shows in the UI under this run). Rerunning a crashed flow run
resumes from its newest checkpoint."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.refresh_index import refresh_index
from flows.settings import resolve
from flows.warm_start import blocks_and_spans, warm_start_for
from realm_core.artifacts import ArtifactRef
from realm_core.config import EmbedConfig, IndexConfig, MaskingConfig, PretrainConfig
from tasks.pretrain import pretrain_realm as pretrain_task


@flow(name="pretrain-realm", log_prints=True)
def pretrain_realm(blocks: ArtifactRef | None = None, spans: ArtifactRef | None = None,
                   retriever: ArtifactRef | None = None, config: PretrainConfig | None = None,
                   masking: MaskingConfig | None = None, embed: EmbedConfig | None = None,
                   index: IndexConfig | None = None, preset: str = "demo",
                   root: str | None = None, force: bool = False) -> dict[str, Any]:
    """Salient-span masked LM over the top-k retrieved blocks plus the null block, retriever and
    reader trained jointly, the index refreshed every `refresh_every` steps. Without
    `blocks`/`spans`/`retriever`, resolves them (the warm start included) through the cache."""
    cfg, root = resolve(preset, None, None, root)
    config = config or cfg.pretrain
    if blocks is None or spans is None:
        blocks, spans = blocks_and_spans(preset, root)
    if retriever is None:
        retriever = warm_start_for(config.warm_start, blocks, spans, cfg, root)
    index = index or cfg.index

    def refresh(embed_config: EmbedConfig, index_root: str) -> None:
        refresh_index(blocks=blocks, embed=embed_config, index=index, root=root, index_root=index_root)

    return pretrain_task(blocks, spans, retriever, config, masking or cfg.masking, embed or cfg.embed,
                         index, root, refresh, force)
