"""The warm-start stage (REALM §3.4): train the retriever's two encoders before REALM
pretraining, so that retrieval starts better than random and the reader learns to use it.

Output: a `retriever` artifact holding `query_encoder/` and `doc_encoder/` (HF save_pretrained
directories with safetensors, plus the projection head), the loss curve as a table and a PNG.
While it trains, checkpoints go to `<root>/checkpoints/warm-start-<key>/`; rerunning the same
command after a crash resumes from the newest one.
"""

from __future__ import annotations

import time
from typing import Any

from realm_core.bert import load_tokenizer
from realm_core.config import ICTConfig, RetroMAEConfig
from realm_core.curves import curve_markdown
from realm_core.errors import ConfigError
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.stage import encoder_hash
from realm_core.spans.mining import open_mined
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.training import Plot, publish_trained

KIND = "retriever"
CURVE_COLUMNS = ("step", "loss", "accuracy", "learning_rate")
RETROMAE_COLUMNS = ("step", "loss", "encoder_loss", "decoder_loss", "learning_rate")


def query_encoder_dir(ref: ArtifactRef) -> str:
    return f"{ref.path}/query_encoder"


def doc_encoder_dir(ref: ArtifactRef) -> str:
    return f"{ref.path}/doc_encoder"


def publish_retriever(cache: CachedStage, encoders: dict[str, RetrieverEncoder], tokenizer_source: str,
                      curve: str, rows: list[dict[str, Any]], plotted: list[str], title: str,
                      stats: dict[str, Any], report: str, method: str, step: int) -> StageResult:
    """A warm start's `retriever` artifact: both encoders as HF folders, the loss curve as a
    table and a PNG, the stats and report; its checkpoints go once it is published."""
    return publish_trained(cache, encoders=encoders, tokenizer_source=tokenizer_source, tables={curve: rows},
                           plot=Plot(f"{curve}.png", rows, "step", plotted, title),
                           manifest={"stats": stats, "report": report, "method": method, "step": step})


def _report(rows: list[dict[str, Any]]) -> str:
    return "### ICT loss curve\n\n" + curve_markdown(rows, CURVE_COLUMNS)


def run_warm_start_ict(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef,
                       config: ICTConfig, progress: Progress | None = None,
                       force: bool = False) -> StageResult:
    """Inverse Cloze Task over the blocks and their sentences (from the salient-span stage)."""
    from realm_core.distributed import Placement, resolve_device
    from realm_core.retrieval.inverse_cloze import cloze_corpus, train_inverse_cloze

    inputs = {"blocks": blocks_ref.content_hash, "sentences": spans_ref.content_hash,
              "encoder": encoder_hash(config.encoder),
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, KIND, config, inputs, force)
    if cache.hit:
        return cache.hit
    blocks, spans = open_mined(store, blocks_ref, spans_ref)
    corpus = cloze_corpus(blocks.read_table("blocks", ["block_id", "title", "text"]),
                          spans.read_table("sentences"), config.min_sentence_chars, blocks.path)
    tokenizer = load_tokenizer(config.encoder)
    # ORQA's pooling: a head over the [CLS] state (mean pooling measured as no gain,
    # docs/experiments/reader.md). The same seed: both start as the untrained-projection
    # retriever, the evaluation's baseline
    query_encoder = RetrieverEncoder.from_pretrained(config.encoder, config.projection_dim, "cls", config.seed,
                                                     dropout=config.dropout)
    doc_encoder = RetrieverEncoder.from_pretrained(config.encoder, config.projection_dim, "cls", config.seed,
                                                   dropout=config.dropout)
    placement = Placement(resolve_device(config.device), config.precision)
    for encoder in (query_encoder, doc_encoder):
        encoder.to(placement.device)
    t0 = time.perf_counter()
    curve = train_inverse_cloze(corpus, query_encoder, doc_encoder, tokenizer, config, cache.checkpoints,
                                progress or NoProgress(), placement=placement)
    rows = [p.__dict__ for p in curve]
    tail = rows[-min(10, len(rows)):]
    stats = {"steps": config.steps, "usable_blocks": len(corpus), "batch_size": config.batch_size,
             "device": str(placement.device), "precision": placement.precision,
             "final_loss": round(sum(r["loss"] for r in tail) / len(tail), 4),
             "final_in_batch_accuracy": round(sum(r["accuracy"] for r in tail) / len(tail), 4),
             "first_loss": round(rows[0]["loss"], 4), "train_seconds": round(time.perf_counter() - t0, 1)}
    return publish_retriever(cache, {"query_encoder": query_encoder, "doc_encoder": doc_encoder}, config.encoder,
                             "ict_curve", rows, ["loss", "accuracy"], f"ICT warm start ({config.batch_size} per batch)",
                             stats, _report(rows), "ict", config.steps)


def _retromae_report(rows: list[dict[str, Any]]) -> str:
    return "### RetroMAE loss curve\n\n" + curve_markdown(rows, RETROMAE_COLUMNS)


def run_warm_start_retromae(store: ArtifactStore, blocks_ref: ArtifactRef, config: RetroMAEConfig,
                            progress: Progress | None = None, force: bool = False) -> StageResult:
    """RetroMAE over the blocks; the trained encoder becomes both retriever encoders (RetroMAE
    trains one encoder; REALM then trains the two apart), pooled at [CLS]."""
    from realm_core.distributed import Placement, resolve_device
    from realm_core.retrieval.retromae import RetroMAE, train_retromae

    inputs = {"blocks": blocks_ref.content_hash, "encoder": encoder_hash(config.encoder),
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, KIND, config, inputs, force)
    if cache.hit:
        return cache.hit
    blocks = store.open(blocks_ref, kind="blocks")
    table = blocks.read_table("blocks", ["title", "text"])
    if table.num_rows == 0:
        raise ConfigError(f"{blocks.path}: no blocks to train RetroMAE on")
    tokenizer = load_tokenizer(config.encoder)
    model = RetroMAE.from_pretrained(config.encoder, dropout=config.dropout)
    placement = Placement(resolve_device(config.device), config.precision)
    model.to(placement.device)
    t0 = time.perf_counter()
    curve = train_retromae(model, table.column("title").to_pylist(), table.column("text").to_pylist(),
                           tokenizer, config, cache.checkpoints, progress or NoProgress(), placement=placement)
    model.to("cpu")
    rows = [p.__dict__ for p in curve]
    tail = rows[-min(10, len(rows)):]
    stats = {"steps": config.steps, "blocks": table.num_rows, "batch_size": config.batch_size,
             "device": str(placement.device), "precision": placement.precision,
             "enhanced_decoding": config.enhanced_decoding,
             "first_loss": round(rows[0]["loss"], 4),
             "final_loss": round(sum(r["loss"] for r in tail) / len(tail), 4),
             "final_decoder_loss": round(sum(r["decoder_loss"] for r in tail) / len(tail), 4),
             "train_seconds": round(time.perf_counter() - t0, 1)}
    encoders = {}
    for name in ("query_encoder", "doc_encoder"):  # one trained encoder, two copies REALM trains apart
        encoders[name] = RetrieverEncoder.from_bert(model.masked_lm.bert, config.projection_dim, "cls", config.seed)
        encoders[name].step = config.steps
    return publish_retriever(cache, encoders, config.encoder, "retromae_curve", rows, ["encoder_loss", "decoder_loss"],
                             f"RetroMAE warm start ({config.batch_size} per batch)", stats, _retromae_report(rows),
                             "retromae", config.steps)


def latest_retriever(store: ArtifactStore) -> ArtifactRef | None:
    """The encoders at the highest retriever step (newest on a tie), or None: warm-start
    `retriever` artifacts and REALM models whose retriever was trained (not the null-only or
    frozen-retriever ablations). The nightly re-index embeds with its document encoder."""
    best: tuple[int, str, ArtifactRef] | None = None
    manifests = [*store.fs.glob(f"{store.root}/{KIND}/*/manifest.json"),
                 *store.fs.glob(f"{store.root}/realm_model/*/manifest.json")]
    for manifest in manifests:
        art = store.open(manifest.rsplit("/", 1)[0])
        cfg = art.manifest.get("config", {})
        if art.kind == "realm_model" and (cfg.get("retrieval") != "realm" or cfg.get("freeze_retriever")):
            continue
        rank = (int(art.manifest.get("step", 0)), str(art.manifest.get("created_at", "")), art.ref)
        if best is None or rank[:2] > best[:2]:
            best = rank
    return best[2] if best else None
