"""The reader warm start: REALM's reader taught to copy a masked span from a block that holds it.

REALM's marginal likelihood rewards retrieving a block only as much as the reader can use it. A
reader that predicts masked spans from the sentence alone (the masked-LM warm-up's) gives every
retrieved block the same likelihood as the null block, the retriever's gradient is noise, and on
the demo corpus every such run collapsed onto the null block. This stage trains the reader first
to predict each training example's masked span reading one block that holds it: among the blocks
that hold the span as whole words, are no trivial retrieval of the query (REALM §3.4) and belong
to no held-out article, the one the warm-started retriever scores highest (`oracle_blocks`).
Pretraining, REALM's and null-only's alike, then starts from this reader.

Its report is the held-out curve: the recoverable held-out examples, each read with its holder
block alone and with the null block alone, oracle minus null paired over articles. Held-out
articles are never trained on: their examples are out of the training split (`split_heldout`)
and their blocks are never evidence.

Shapes: E examples, N blocks, D embedding dim.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from realm_core.config import EmbedConfig, MaskingConfig, PretrainConfig
from realm_core.curves import curve_markdown
from realm_core.distributed import Placement, rank_zero_artifact
from realm_core.errors import RealmError
from realm_core.pretrain.heldout import article_bootstrap, is_heldout
from realm_core.pretrain.loop import PretrainData
from realm_core.pretrain.reading import (
    CopyTraining,
    Reading,
    oracle_blocks,
    read_blocks,
    train_copy_reader,
)
from realm_core.progress import NoProgress, Progress
from realm_core.spans.masking import MaskedExample
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.store.schemas import SCHEMAS, TableSchema
from realm_core.training import publish_trained

KIND = "reader_copy"
CURVE_COLUMNS = ("step", "loss", "span_accuracy", "heldout_oracle_accuracy", "heldout_null_accuracy")
# registered beside the stage that writes them, so that they move this stage's code hash alone
SCHEMAS.setdefault("reader_copy_metrics", TableSchema("reader_copy_metrics", 1, pa.schema([
    ("step", pa.float64()),
    ("loss", pa.float64()),                     # -log p(y|x,z) of the span, z the holder block
    ("span_accuracy", pa.float64()),            # every masked wordpiece right, this step's batch
    ("heldout_oracle_accuracy", pa.float64()),  # recoverable held-out examples read with their holder (NaN: not read)
    ("heldout_null_accuracy", pa.float64()),    # the same read with the null block alone
])))
SCHEMAS.setdefault("reader_copy_examples", TableSchema("reader_copy_examples", 1, pa.schema([
    ("doc_id", pa.string()),          # the training example's article (never a held-out one)
    ("block_id", pa.int64()),         # the block its masked sentence comes from
    ("evidence_block", pa.int64()),   # the holder block it is read with
])))


def warm_start_vectors(store: ArtifactStore, blocks_ref: ArtifactRef, doc_encoder: str, embed: EmbedConfig,
                       n_blocks: int, progress: Progress | None = None) -> np.ndarray:
    """(N, D) every block embedded by `doc_encoder` through the embed cache: for the warm start's
    encoder, the vectors of the first index REALM's pretraining builds (one cached artifact)."""
    from realm_core.retrieval.embed import load_embeddings
    from realm_core.retrieval.stage import run_embed_blocks

    emb = run_embed_blocks(store, blocks_ref, embed.model_copy(update={"doc_encoder": doc_encoder}), progress)
    assert emb.ref is not None
    return load_embeddings(Path(emb.ref.path) / "embeddings", store.open(emb.ref).manifest["embeddings"], n_blocks)


def query_vectors(encoder: Any, examples: list[MaskedExample], pad_id: int, precision: str) -> np.ndarray:
    """(E, D) the masked queries embedded by a query encoder."""
    from realm_core.retrieval.embed import embed_token_ids

    return embed_token_ids(encoder, [e.input_ids for e in examples], pad_id, 64, precision=precision)


def readable_blocks(data: PretrainData, heldout_every: int) -> np.ndarray:
    """(N,) True for the blocks of articles that are not held out: the only evidence it reads."""
    return np.asarray([not is_heldout(str(doc), heldout_every) for doc in data.blocks.doc_ids], dtype=bool)


def copy_examples(data: PretrainData, config: PretrainConfig, q_vectors_of: Any,
                  block_vectors: np.ndarray) -> tuple[list[MaskedExample], np.ndarray, int]:
    """The training examples copy training draws from, each with its evidence block: a seeded
    pool of `pool x steps x batch_size` training examples, kept where a readable allowed block
    holds the span. Returns (examples, (E,) evidence block ids, the pool's size)."""
    c = config.reader_copy
    order = np.random.default_rng(config.seed).permutation(len(data.train))
    pool = [data.train[int(i)] for i in order[: min(len(data.train), c.pool * c.steps * c.batch_size)]]
    oracle = oracle_blocks(pool, q_vectors_of(pool), block_vectors, data.locator, data.blocks, config.exclusion,
                           ranks=False, readable=readable_blocks(data, config.heldout_every))
    keep = np.flatnonzero(oracle.block >= 0)
    return [pool[int(i)] for i in keep], oracle.block[keep], len(pool)


def run_reader_copy(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef, retriever_ref: ArtifactRef,
                    reader_start: str, reader_hash: str, config: PretrainConfig, masking: MaskingConfig,
                    embed: EmbedConfig, progress: Progress | None = None, force: bool = False,
                    chunk_encoder: str | None = None) -> StageResult | None:
    """The reader `reader_start` (a reader directory; `reader_hash` its content) trained by
    `pretrain.reader_copy`; None when its steps are 0. Cached by the blocks, spans, warm start,
    starting reader, the pretraining fields that split and mask the examples, and code; resumes
    from its newest checkpoint."""
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.pretrain.stage import pretrain_data
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
    from realm_core.spans.mining import open_mined

    c = config.reader_copy
    if c.steps <= 0:
        return None
    # what the examples, their split and the reading depend on, besides reader_copy itself
    reads = {"reader_copy": c.model_dump(mode="json", exclude=set(c.EXECUTION_FIELDS)),
             **{f: getattr(config, f) for f in ("heldout_every", "eval_examples", "seed", "reader_length",
                                                "exclusion", "dropout", "precision")}}
    inputs = {"blocks": blocks_ref.content_hash, "spans": spans_ref.content_hash, "retriever": retriever_ref.content_hash,
              "reader": reader_hash, "masking": masking.config_hash(), "embed": embed.config_hash(),
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, KIND, reads, inputs, force)
    if cache.hit:
        return cache.hit
    placement = Placement.from_env(config.device, config.precision)
    if not placement.is_main:  # under torchrun rank 0 trains; the others wait for its artifact
        return rank_zero_artifact(placement, cache)
    bar = progress or NoProgress()
    t0 = time.perf_counter()
    blocks, spans = open_mined(store, blocks_ref, spans_ref)
    data = pretrain_data(blocks, spans, config, masking, chunk_encoder)
    vectors = warm_start_vectors(store, blocks_ref, doc_encoder_dir(retriever_ref), embed, len(data.blocks))  # (N, D)
    query_encoder = RetrieverEncoder.from_pretrained(query_encoder_dir(retriever_ref)).to(placement.device)

    def q_vectors_of(examples: list[MaskedExample]) -> np.ndarray:
        return query_vectors(query_encoder, examples, data.tokenizer.pad_token_id, placement.precision)  # (E, D)

    examples, evidence, pool = copy_examples(data, config, q_vectors_of, vectors)
    if len(examples) < c.batch_size:
        raise RealmError(f"{spans.path}: {len(examples)} of {pool} training examples have a block that holds "
                         f"their span; pretrain.reader_copy needs at least batch_size={c.batch_size}")
    # the held-out curve reads the recoverable held-out examples with their holder (any article's
    # but their own: reading is evaluation, never training) and with the null block
    held = oracle_blocks(data.heldout, q_vectors_of(data.heldout), vectors, data.locator, data.blocks,
                         config.exclusion, ranks=False)
    found = np.flatnonzero(held.block >= 0)
    scored, chosen = [data.heldout[int(i)] for i in found], held.block[found]
    latest: list[Reading] = []

    def heldout_reading(reader: Any) -> dict[str, float]:
        read = read_blocks(reader, scored, chosen, data.blocks, data.tokenizer, config.reader_length,
                           data.continuation, compute=placement.compute)
        latest[:] = [read]
        return {"heldout_oracle_accuracy": float(read.block_correct.mean()),
                "heldout_null_accuracy": float(read.null_correct.mean())}

    training = CopyTraining(steps=c.steps, batch_size=c.batch_size, learning_rate=c.learning_rate,
                            reader_length=config.reader_length, warmup_steps=c.warmup_steps,
                            weight_decay=c.weight_decay, max_grad_norm=c.max_grad_norm, seed=config.seed,
                            checkpoint_every=c.checkpoint_every)
    reader = KnowledgeAugmentedEncoder.from_pretrained(reader_start, dropout=config.dropout, seed=config.seed)
    curve = train_copy_reader(reader, examples, evidence, data.blocks, data.tokenizer, training, cache.checkpoints,
                              placement, bar, heldout_reading if scored else None, c.eval_every or c.steps)
    if scored and not latest:  # resumed after its last step: read the trained reader once
        heldout_reading(reader)
    stats: dict[str, Any] = {
        "steps": c.steps, "training_examples": len(examples), "pool": pool,
        "training_articles": len({e.doc_id for e in examples}),
        "heldout_examples": len(data.heldout), "recoverable_heldout": len(scored),
        "final_span_accuracy": round(float(np.mean([r["span_accuracy"] for r in curve[-20:]])), 4),
        "precision": placement.precision, "wall_seconds": round(time.perf_counter() - t0, 1)}
    report = "### Reader warm start: copying a span from a block that holds it\n\n"
    if latest:
        read = latest[0]
        delta, lo, hi = article_bootstrap(read.block_correct.tolist(), read.null_correct.tolist(),
                                          [e.doc_id for e in scored])
        stats.update({"heldout_oracle_accuracy": round(float(read.block_correct.mean()), 4),
                      "heldout_null_accuracy": round(float(read.null_correct.mean()), 4),
                      "oracle_minus_null": {"delta": round(delta, 4), "ci95": [round(lo, 4), round(hi, 4)]}})
        report += (f"On {len(scored):,} recoverable held-out examples ({len({e.doc_id for e in scored})} articles "
                   f"never trained on), the trained reader reading the holder block alone gets "
                   f"{100 * stats['heldout_oracle_accuracy']:.1f}% of spans right, the null block alone "
                   f"{100 * stats['heldout_null_accuracy']:.1f}%: oracle - null {100 * delta:+.1f} points "
                   f"[{100 * lo:+.1f}, {100 * hi:+.1f}] (95%, articles resampled).\n\n")
    evals = [r for r in curve if "heldout_oracle_accuracy" in r]
    report += curve_markdown(evals or curve, CURVE_COLUMNS if evals else CURVE_COLUMNS[:3])
    tables: dict[str, list[dict[str, Any]]] = {"reader_copy_metrics": [{k: float(r.get(k, float("nan"))) for k in CURVE_COLUMNS} for r in curve],
              "reader_copy_examples": [{"doc_id": e.doc_id, "block_id": int(e.block_id), "evidence_block": int(z)}
                                       for e, z in zip(examples, evidence, strict=True)]}
    return publish_trained(cache, reader=reader, tokenizer=data.tokenizer, tables=tables,
                           manifest={"stats": stats, "report": report}, barrier=placement.barrier)


def reader_dir(ref: ArtifactRef) -> str:
    """The trained reader's directory (the knowledge-augmented encoder + tokenizer)."""
    return str(Path(ref.path) / "reader")
