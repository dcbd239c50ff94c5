"""Stage flows of the corpus: ingest-corpus and chunk-blocks."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.fanout import dask_runner, ingest_corpus_dask
from flows.settings import resolve
from realm_core.artifacts import ArtifactRef
from realm_core.config import ChunkConfig, IngestConfig
from tasks.corpus import chunk_blocks as chunk_task
from tasks.corpus import ingest_documents


@flow(name="ingest-corpus", log_prints=True)
def ingest_corpus(config: IngestConfig | None = None, preset: str = "demo",
                  root: str | None = None, force: bool = False, dask: str | None = None) -> dict[str, Any]:
    """Corpora (Wikipedia dumps, SQuAD, DPR, JSONL) -> documents artifact. `dask` (local:N or a
    scheduler address) ingests the source files on Dask workers, one task per file."""
    cfg, root = resolve(preset, None, None, root)
    if dask:
        return ingest_corpus_dask.with_options(task_runner=dask_runner(dask))(config or cfg.ingest, root, force)
    return ingest_documents(config or cfg.ingest, root, force)


@flow(name="chunk-blocks", log_prints=True)
def chunk_blocks(documents: ArtifactRef | None = None, config: ChunkConfig | None = None,
                 preset: str = "demo", root: str | None = None,
                 force: bool = False) -> dict[str, Any]:
    """documents -> blocks of <= 288 wordpieces. Without `documents`, ingests (cached) first."""
    cfg, root = resolve(preset, None, None, root)
    if documents is None:
        documents = ingest_documents(cfg.ingest, root)["ref"]
    return chunk_task(documents, config or cfg.chunk, root, force)
