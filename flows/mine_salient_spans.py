"""Stage flow: blocks -> salient spans (spaCy NER entities + regex dates, REALM §3.4)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.fanout import dask_runner, mine_spans_dask
from flows.settings import resolve
from realm_core.artifacts import ArtifactRef
from realm_core.config import SpanConfig
from tasks.corpus import chunk_blocks, ingest_documents
from tasks.spans import mine_salient_spans as mine_task


@flow(name="mine-salient-spans", log_prints=True)
def mine_salient_spans(blocks: ArtifactRef | None = None, config: SpanConfig | None = None,
                       preset: str = "demo", root: str | None = None,
                       force: bool = False, dask: str | None = None) -> dict[str, Any]:
    """Cached on the blocks' content hash plus this config. Without `blocks`, resolves ingest and
    chunk through the cache first. `dask` (local:N or a scheduler address) mines shards of
    blocks on Dask workers."""
    cfg, root = resolve(preset, None, None, root)
    if blocks is None:
        docs = ingest_documents(cfg.ingest, root)["ref"]
        blocks = chunk_blocks(docs, cfg.chunk, root)["ref"]
    if dask:
        return mine_spans_dask.with_options(task_runner=dask_runner(dask))(blocks, config or cfg.spans, root, force)
    return mine_task(blocks, config or cfg.spans, root, force)
