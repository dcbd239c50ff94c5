"""Retrieval evaluation, one harness for every retriever: recall@k and MRR on question sets whose
gold blocks are the blocks that contain a gold answer (DPR's has_answer rule).

- SQuAD-open: the questions of SQuAD articles 30-39 against the pooled blocks of the whole
  corpus (Wikipedia distractors included).
- DPR NQ sample: its questions against its own passages (the blocks of the `dpr` source).

Systems are measured in the same run over the same blocks, each a retriever of the one registry
(`realm_core.retrieval.retrievers.RETRIEVERS`): BM25, dense retrievers whose blocks are embedded
by the embed stage (so the index embeddings are reused through the cache), and labelled
references.

Shapes: Q questions, N blocks, D embedding dim, R ranking depth, C candidate blocks of a question set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from realm_core.answers import has_answer, token_string
from realm_core.config import EmbedConfig, RetrievalEvalConfig, resolve_data_path
from realm_core.errors import ConfigError
from realm_core.progress import NoProgress, Progress
from realm_core.questions import QuestionSet, dpr_questions, squad_questions
from realm_core.retrieval.retrievers import RETRIEVERS, Blocks, Question, Sources
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version

KIND = "retrieval_eval"


@dataclass(frozen=True)
class RetrieverSystem:
    """A retriever under evaluation: `kind` names its class in `RETRIEVERS`. One that needs a
    query encoder has `doc_embed` embed the blocks and `query_encoder` with the same head settings
    (a fresh head gets the same seed, so an untrained query and document projection are one and
    the same matrix)."""

    name: str
    kind: str
    query_encoder: str | None = None
    doc_embed: EmbedConfig | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in RETRIEVERS:
            raise ConfigError(f"retriever {self.name!r}: kind {self.kind!r}, expected one of {', '.join(RETRIEVERS)}")

    def key(self) -> dict[str, Any]:
        """What the evaluation's cache key holds of this system: its settings, no path (a dense
        system's encoders enter the key by their content hashes, beside this)."""
        return {"name": self.name, "kind": self.kind,
                "doc_embed": self.doc_embed.config_hash() if self.doc_embed else None}


@dataclass
class EvalTask:
    questions: QuestionSet
    candidates: np.ndarray  # (C,) block ids this question set is searched against
    results: dict[str, dict[str, float]] = field(default_factory=dict)


def first_hits(ranked: np.ndarray, answers: list[tuple[str, ...]], block_tokens: Any) -> np.ndarray:
    """(Q,) 1-based rank of the first block holding a gold answer within `ranked` (Q, R); 0: none."""
    out = np.zeros(len(ranked), dtype=np.int32)
    for q, row in enumerate(ranked):
        for r, block in enumerate(row):
            if block >= 0 and has_answer(answers[q], block_tokens(int(block))):
                out[q] = r + 1
                break
    return out


def recall_metrics(hits: np.ndarray, ks: tuple[int, ...], depth: int) -> dict[str, float]:
    found = hits > 0
    metrics = {f"R@{k}": float(np.mean(found & (hits <= k))) for k in ks}
    metrics[f"MRR@{depth}"] = float(np.mean(np.where(found, 1.0 / np.maximum(hits, 1), 0.0)))
    return metrics


def _tasks(config: RetrievalEvalConfig, doc_ids: list[str], source: str) -> list[EvalTask]:
    squad_prefix, dpr_prefix = f"{config.squad_source}:", f"{config.dpr_source}:"
    if not any(d.startswith(squad_prefix) for d in doc_ids):
        raise ConfigError(f"{source}: SQuAD-open needs the SQuAD articles in the corpus (no "
                          f"documents of source {config.squad_source!r}); add the squad source to ingest")
    all_blocks = np.arange(len(doc_ids), dtype=np.int64)
    tasks = [EvalTask(squad_questions(resolve_data_path(config.squad_path), config.squad_articles),
                      all_blocks)]
    if config.dpr_path is not None:
        dpr_blocks = np.asarray([i for i, d in enumerate(doc_ids) if d.startswith(dpr_prefix)], np.int64)
        if len(dpr_blocks) == 0:
            raise ConfigError(f"{source}: the DPR sample needs its passages in the corpus (source "
                              f"{config.dpr_source!r}); add it to ingest or set dpr_path to null")
        tasks.append(EvalTask(dpr_questions(resolve_data_path(config.dpr_path)), dpr_blocks))
    return tasks


def results_markdown(results: dict[str, Any], systems: list[dict[str, Any]]) -> str:
    """Systems as rows, each dataset's metrics as columns."""
    datasets = list(results)
    header, rule = ["retriever"], ["---"]
    for d in datasets:
        for m in results[d]["metrics"]:
            header.append(f"{d} {m}")
            rule.append("---:")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    for s in systems:
        cells = [s["name"] + (f" ({s['note']})" if s.get("note") else "")]
        for d in datasets:
            cells += [f"{v:.3f}" for v in results[d]["systems"][s["name"]].values()]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = ", ".join(f"{d}: {results[d]['questions']} questions over {results[d]['blocks']} blocks"
                      for d in datasets)
    return "\n".join(lines) + f"\n\n{sizes}."


def run_evaluate_retrieval(store: ArtifactStore, blocks_ref: ArtifactRef,
                           systems: list[RetrieverSystem], config: RetrievalEvalConfig,
                           progress: Progress | None = None) -> StageResult:
    from realm_core.bert import load_tokenizer
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.stage import encoder_hash

    progress = progress or NoProgress()
    inputs = {"blocks": blocks_ref.content_hash, "code": code_version((__name__,), ("bm25s",))}
    for i, s in enumerate(systems):
        inputs[f"system{i}"] = str(s.key())
        if RETRIEVERS[s.kind].needs_query_encoder:
            assert s.query_encoder is not None and s.doc_embed is not None
            inputs[f"system{i}_encoders"] = (encoder_hash(s.query_encoder) + ":"
                                             + encoder_hash(s.doc_embed.doc_encoder))
    cache = CachedStage(store, KIND, config, inputs)
    if cache.hit:
        return cache.hit
    blocks = store.open(blocks_ref, kind="blocks")
    table = blocks.read_table("blocks", ["block_id", "doc_id", "title", "text"])
    doc_ids = table.column("doc_id").to_pylist()
    tasks = _tasks(config, doc_ids, blocks.path)
    texts = table.column("text").to_pylist()
    corpus = Blocks(table.column("title").to_pylist(), texts)
    token_cache: dict[int, str] = {}

    def block_tokens(block: int) -> str:
        if block not in token_cache:
            token_cache[block] = token_string(texts[block])  # DPR matches passage text, not title
        return token_cache[block]

    rows: list[dict[str, Any]] = []
    top = max(config.ks)
    for n, s in enumerate(systems, 1):
        kind = RETRIEVERS[s.kind]
        sources = Sources(store, blocks_ref, s.doc_embed, question_length=config.query_length,
                          batch_size=config.batch_size, progress=progress)
        if kind.needs_query_encoder:  # with its document encoder's head settings
            assert s.query_encoder is not None and s.doc_embed is not None
            e = s.doc_embed
            sources.query_encoder = RetrieverEncoder.from_pretrained(s.query_encoder, e.projection_dim, e.pooling,
                                                                     e.seed, e.normalize).eval()
            sources.tokenizer = load_tokenizer(s.query_encoder)
        retriever = kind.build(corpus, config.depth, sources)  # a dense one's embeddings: their own bar
        progress.start(f"evaluate retriever {n}/{len(systems)} ({s.name})", len(tasks), "question sets")
        for task in tasks:
            qs = task.questions.questions
            ranked = retriever.propose([Question(q.question) for q in qs], task.candidates).ids  # (Q, R)
            hits = first_hits(ranked, [q.answers for q in qs], block_tokens)
            task.results[s.name] = recall_metrics(hits, config.ks, config.depth)
            rows += [{"dataset": task.questions.name, "system": s.name, "qid": q.qid,
                      "question": q.question, "first_hit": int(h),
                      "top_block_ids": [int(b) for b in r[:top]]}
                     for q, h, r in zip(qs, hits, ranked, strict=True)]
            progress.advance(1)
        progress.finish()
    results = {t.questions.name: {"questions": len(t.questions.questions), "blocks": len(t.candidates),
                                  "dropped": t.questions.dropped,
                                  "metrics": list(next(iter(t.results.values()))),
                                  "systems": t.results} for t in tasks}
    specs = [{"name": s.name, "note": s.note} for s in systems]
    report = results_markdown(results, specs)
    headline = f"R@{5 if 5 in config.ks else config.ks[0]}"
    stats = {f"{t.questions.name} {headline} {s}": round(m[headline], 3)
             for t in tasks for s, m in t.results.items()}
    with cache.write() as out:
        out.table("retrieval_results").write(rows)
        out.extra_manifest.update({"results": results, "systems": specs, "stats": stats,
                                   "report": report})
    return cache.result()


def standard_systems(retriever_ref: ArtifactRef | None, embed: EmbedConfig, encoder: str,
                     projection_dim: int, seed: int, others: dict[str, ArtifactRef] | None = None,
                     references: bool = True) -> list[RetrieverSystem]:
    """BM25, the untrained projection (the warm start's own starting point), the warm-started
    retriever when given, other warm starts by name (`others`, e.g. RetroMAE), and off-the-shelf
    all-MiniLM mean pooling as a labelled reference. Without `references`, BM25 and the trained
    retrievers alone (the two reference rows each embed the whole corpus once more)."""
    from realm_core.config import BUNDLED_ENCODER
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir

    systems = [RetrieverSystem("BM25", "bm25")]
    if references:
        systems.append(RetrieverSystem("untrained projection", "dense", encoder, embed.model_copy(update={
            "doc_encoder": encoder, "projection_dim": projection_dim, "pooling": "cls",
            "normalize": False, "seed": seed})))
    if retriever_ref is not None:
        systems.append(RetrieverSystem("ICT", "dense", query_encoder_dir(retriever_ref),
                                       embed.model_copy(update={"doc_encoder": doc_encoder_dir(retriever_ref)})))
    for name, ref in (others or {}).items():
        systems.append(RetrieverSystem(name, "dense", query_encoder_dir(ref),
                                       embed.model_copy(update={"doc_encoder": doc_encoder_dir(ref)})))
    if references and encoder == BUNDLED_ENCODER:
        systems.append(RetrieverSystem(
            "all-MiniLM-L6-v2 mean pooling", "dense", encoder,
            embed.model_copy(update={"doc_encoder": encoder, "projection_dim": 0, "pooling": "mean",
                                     "normalize": True}),
            note="reference only: trained on pairs that include SQuAD and NQ"))
    return systems
