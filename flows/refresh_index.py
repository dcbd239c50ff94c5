"""Stage flows of the retriever's index: embed-blocks, build-index, and refresh-index (both),
which the nightly schedule runs and REALM pretraining will run every `refresh_every` steps."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.settings import resolve
from realm_core.artifacts import ArtifactRef
from realm_core.config import EmbedConfig, IndexConfig
from tasks.corpus import chunk_blocks, ingest_documents
from tasks.retrieval import build_index, embed_blocks


def _blocks(preset: str, root: str) -> ArtifactRef:
    cfg, _ = resolve(preset, None, None, root)
    docs = ingest_documents(cfg.ingest, root)["ref"]
    ref: ArtifactRef = chunk_blocks(docs, cfg.chunk, root)["ref"]
    return ref


@flow(name="refresh-index", log_prints=True)
def refresh_index(blocks: ArtifactRef | None = None, embed: EmbedConfig | None = None,
                  index: IndexConfig | None = None, preset: str = "demo",
                  root: str | None = None) -> dict[str, Any]:
    """Re-embed every block with `embed.doc_encoder` and switch to the new index version
    atomically. Without `blocks`, resolves ingest and chunk through the cache."""
    cfg, root = resolve(preset, None, None, root)
    blocks = blocks or _blocks(preset, root)
    embedded = embed_blocks(blocks, embed or cfg.embed, root)
    built = build_index(embedded["ref"], blocks, index or cfg.index, root)
    return {"embed": embedded, "index": built}
