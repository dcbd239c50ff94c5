"""Stage flows of the retriever's index: embed-blocks, build-index, and refresh-index (both),
which the nightly schedule runs and REALM pretraining will run every `refresh_every` steps."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.fanout import dask_runner, embed_blocks_dask
from flows.settings import resolve
from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import EmbedConfig, IndexConfig
from realm_core.retrieval.warm_start import doc_encoder_dir, latest_retriever
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
                  root: str | None = None, index_root: str | None = None,
                  dask: str | None = None) -> dict[str, Any]:
    """Re-embed every block and switch to the new index version atomically. The document
    encoder is `embed.doc_encoder` when `embed` is given, else the newest retriever artifact's
    (warm start or pretraining), else the preset's. Without `blocks`, resolves ingest and chunk
    through the cache. `index_root` keeps the versions apart from the main index (a
    pretraining run's own namespace). `dask` fans the embedding out over a Dask cluster."""
    cfg, root = resolve(preset, None, None, root)
    blocks = blocks or _blocks(preset, root)
    if embed is None:
        newest = latest_retriever(ArtifactStore(root))
        embed = cfg.embed if newest is None else cfg.embed.model_copy(
            update={"doc_encoder": doc_encoder_dir(newest)})
        print(f"document encoder: {embed.doc_encoder}")
    if dask:  # shards as tasks on Dask workers: local:N or a scheduler address
        embedded = embed_blocks_dask.with_options(task_runner=dask_runner(dask))(blocks, embed, root)
    else:
        embedded = embed_blocks(blocks, embed, root)
    built = build_index(embedded["ref"], blocks, index or cfg.index, root, index_root)
    return {"embed": embedded, "index": built}
