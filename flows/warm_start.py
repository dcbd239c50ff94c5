"""Stage flows of the retriever's warm start (REALM §3.4): the Inverse Cloze Task or RetroMAE,
and the retrieval evaluation that shows what it bought (BM25, untrained, ICT, off-the-shelf
reference)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.settings import resolve
from realm_core.artifacts import ArtifactRef
from realm_core.config import (
    EmbedConfig,
    ICTConfig,
    PipelineConfig,
    RetrievalEvalConfig,
    RetroMAEConfig,
)
from tasks.corpus import chunk_blocks, ingest_documents
from tasks.retrieval import evaluate_retrieval as evaluate_task
from tasks.retrieval import warm_start_ict as ict_task
from tasks.retrieval import warm_start_retromae as retromae_task
from tasks.spans import mine_salient_spans


def blocks_and_spans(preset: str, root: str, cfg: PipelineConfig | None = None) -> tuple[ArtifactRef, ArtifactRef]:
    """The preset's (or `cfg`'s) blocks and salient spans, through the cache (tasks in the
    calling flow)."""
    cfg = cfg or resolve(preset, None, None, root)[0]
    docs = ingest_documents(cfg.ingest, root)["ref"]
    blocks: ArtifactRef = chunk_blocks(docs, cfg.chunk, root)["ref"]
    spans: ArtifactRef = mine_salient_spans(blocks, cfg.spans, root)["ref"]
    return blocks, spans


@flow(name="warm-start-ict", log_prints=True)
def warm_start_ict(blocks: ArtifactRef | None = None, spans: ArtifactRef | None = None,
                   config: ICTConfig | None = None, preset: str = "demo", root: str | None = None,
                   force: bool = False) -> dict[str, Any]:
    """Train the query and document encoders with the Inverse Cloze Task. Cached on the blocks'
    and sentences' content hashes plus this config; a crashed run resumes from its last
    checkpoint when rerun. Without `blocks`/`spans`, resolves them through the cache."""
    cfg, root = resolve(preset, None, None, root)
    if blocks is None or spans is None:
        blocks, spans = blocks_and_spans(preset, root)
    return ict_task(blocks, spans, config or cfg.ict, root, force)


def warm_start_for(method: str, blocks: ArtifactRef, spans: ArtifactRef, cfg: PipelineConfig,
                   root: str) -> ArtifactRef | None:
    """The retriever that `pretrain.warm_start` names, through the cache; None for `none`."""
    if method == "ict":
        ref: ArtifactRef = ict_task(blocks, spans, cfg.ict, root)["ref"]
        return ref
    if method == "retromae":
        ref = retromae_task(blocks, cfg.retromae, root)["ref"]
        return ref
    return None


@flow(name="warm-start-retromae", log_prints=True)
def warm_start_retromae(blocks: ArtifactRef | None = None, config: RetroMAEConfig | None = None,
                        preset: str = "demo", root: str | None = None, force: bool = False) -> dict[str, Any]:
    """Pretrain the retriever's encoder as a masked auto-encoder (RetroMAE): the block's [CLS]
    state must carry enough for a one-layer decoder to rebuild it. Cached on the blocks'
    content hash plus this config; a crashed run resumes from its last checkpoint."""
    cfg, root = resolve(preset, None, None, root)
    if blocks is None:
        blocks = blocks_and_spans(preset, root, cfg)[0]
    return retromae_task(blocks, config or cfg.retromae, root, force)


@flow(name="evaluate-retrieval", log_prints=True)
def evaluate_retrieval(blocks: ArtifactRef | None = None, retriever: ArtifactRef | None = None,
                       embed: EmbedConfig | None = None, ict: ICTConfig | None = None,
                       config: RetrievalEvalConfig | None = None, preset: str = "demo",
                       root: str | None = None) -> dict[str, Any]:
    """Recall@k and MRR of every retriever on SQuAD-open and the DPR NQ sample, same blocks,
    same run. Without `blocks`/`retriever`, resolves them (and trains ICT) through the cache."""
    cfg, root = resolve(preset, None, None, root)
    if blocks is None or retriever is None:
        blocks, spans = blocks_and_spans(preset, root)
        retriever = ict_task(blocks, spans, ict or cfg.ict, root)["ref"]
    return evaluate_task(blocks, retriever, embed or cfg.embed, ict or cfg.ict,
                         config or cfg.retrieval_eval, root)
