"""The REALM pretraining stage: masked examples + warm-started retriever + index -> a
`realm_model` artifact (reader, query encoder, document encoder, metrics, eval, plot).

Everything a run refreshes (encoder snapshots, their embeddings' index versions and its CURRENT
pointer) lives in the run's own namespace `<root>/runs/pretrain-<key>/`, so two runs with
different configs never claim the same index version. Block embeddings share the main cache.
Checkpoints go to `<root>/checkpoints/realm_model-<key>/` (`CachedStage.checkpoints`); rerunning
resumes from the newest.

Launched by torchrun, every rank runs this stage over the shared artifact root: rank 0 builds
the first index, refreshes it, checkpoints and publishes the artifact; the others train their
slice of each batch and return rank 0's artifact.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from realm_core.bert import load_tokenizer
from realm_core.blocks import blocks_tokenizer
from realm_core.config import EmbedConfig, IndexConfig, MaskingConfig, PretrainConfig
from realm_core.distributed import Placement, rank_zero_artifact, resolve_device
from realm_core.errors import ConfigError, RealmError
from realm_core.pretrain.batches import BlockTexts
from realm_core.pretrain.heldout import (
    is_heldout,
    split_heldout,
)
from realm_core.pretrain.loop import Curves, PretrainData, RealmModels, train_realm
from realm_core.pretrain.reader_mlm import reader_mlm_dir, run_reader_mlm
from realm_core.pretrain.refresh import IndexHandle, IndexRefresher
from realm_core.pretrain.summary import heldout_rows, pretrain_report, pretrain_stats
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.stage import encoder_hash, run_build_index, run_embed_blocks
from realm_core.retrieval.versions import load_index
from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
from realm_core.spans.mining import open_mined
from realm_core.store.artifacts import Artifact, ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.training import Plot, publish_trained

KIND = "realm_model"
RefreshIndex = Callable[[EmbedConfig, str], None]


def run_warm_reader(store: ArtifactStore, blocks_ref: ArtifactRef, config: PretrainConfig,
                    placement: Placement | None = None, progress: Progress | None = None) -> StageResult | None:
    """The reader's masked-LM warm-up (`pretrain.reader_mlm`) over the blocks of the articles that
    are not held out: one cached artifact that REALM, null-only and the open-QA baselines' span
    readers all start from. None when the warm-up is off (steps 0: the reader encoder ships its
    own MLM pretraining, like bert-base-uncased). Trained on `placement`, by default on
    `pretrain.device` in `pretrain.precision`, as the pretraining that reads it (one artifact for
    the stage graph's warm-up and pretraining's own call)."""
    if config.reader_mlm.steps <= 0:
        return None
    place = placement or Placement(resolve_device(config.device), config.precision)
    return run_reader_mlm(store, blocks_ref, config.reader_mlm, config.reader_encoder,
                          lambda doc: is_heldout(doc, config.heldout_every),
                          f"sha256(doc_id) % {config.heldout_every}", place, progress)


def _vocab_hash(spec: str) -> str:
    vocab = load_tokenizer(spec).get_vocab()
    return hashlib.sha256("\n".join(sorted(vocab, key=vocab.__getitem__)).encode()).hexdigest()


def _check_compatible(config: PretrainConfig, retriever: ArtifactRef | None, blocks: Any,
                      blocks_encoder: str) -> None:
    """Refuse, before any training step, encoders that cannot read the blocks' wordpieces."""
    reader_vocab = _vocab_hash(config.reader_encoder)
    if _vocab_hash(blocks_encoder) != reader_vocab:
        raise ConfigError(f"{blocks.path}: blocks were cut with {blocks_encoder!r}, whose vocabulary "
                          f"differs from the reader's ({config.reader_encoder!r})")
    if retriever is not None:
        for spec in (query_encoder_dir(retriever), doc_encoder_dir(retriever)):
            if _vocab_hash(spec) != reader_vocab:
                raise ConfigError(f"{spec}: warm-start encoder has another tokenizer than the reader "
                                  f"({config.reader_encoder!r}); warm-start with the same vocabulary")
    elif config.fresh_encoder is not None and _vocab_hash(config.fresh_encoder) != reader_vocab:
        raise ConfigError(f"{config.fresh_encoder}: pretrain.fresh_encoder has another tokenizer than the reader "
                          f"({config.reader_encoder!r}); start the retriever from one with the same vocabulary")


def fresh_encoders(config: PretrainConfig, dropout: bool = True) -> tuple[RetrieverEncoder, RetrieverEncoder]:
    """warm_start none: both encoders from `pretrain.fresh_encoder` (default: the reader's BERT)
    with the same fresh head (a shared seed), or none (`fresh_projection_dim` 0)."""
    return tuple(RetrieverEncoder.from_pretrained(config.fresh_encoder or config.reader_encoder,
                                                  projection_dim=config.fresh_projection_dim,
                                                  seed=config.seed, dropout=config.dropout if dropout else None)
                 for _ in range(2))  # type: ignore[return-value]


def _encoders(config: PretrainConfig, retriever: ArtifactRef | None) -> tuple[RetrieverEncoder, RetrieverEncoder]:
    if retriever is None:
        return fresh_encoders(config)
    q = RetrieverEncoder.from_pretrained(query_encoder_dir(retriever), dropout=config.dropout)
    d = RetrieverEncoder.from_pretrained(doc_encoder_dir(retriever), dropout=config.dropout)
    if q.projection_dim != d.projection_dim:
        raise ConfigError(f"{retriever.path}: query ({q.projection_dim}) and document ({d.projection_dim}) "
                          "embedding dimensions differ")
    return q, d


def _blocks_encoder(blocks: Artifact, config: PretrainConfig, chunk_encoder: str | None) -> str:
    """The tokenizer that cut the blocks, to read the spans' wordpieces again: `chunk.encoder`
    where given, else the reader's, else the path the blocks record."""
    where = {"chunk.encoder": chunk_encoder} if chunk_encoder else {}
    return blocks_tokenizer(blocks, {**where, "pretrain.reader_encoder": config.reader_encoder})


def pretrain_data(blocks: Artifact, spans: Artifact, config: PretrainConfig, masking: MaskingConfig,
                  chunk_encoder: str | None = None, counts: Counter[str] | None = None) -> PretrainData:
    """The masked examples exactly as this stage builds and splits them, with the blocks' texts and
    the reader's tokenizer: every salient span of `spans` masked (`masking`), whole articles held
    out (one in `config.heldout_every`) and the held-out test drawn at random over their examples
    (`config.eval_examples`, `config.seed`); held-out articles never train. An experiment that
    measures a run reads the same examples through this. `counts` tallies what masking skipped."""
    from realm_core.spans.masking import iter_examples

    blocks_encoder = _blocks_encoder(blocks, config, chunk_encoder)
    tokenizer = load_tokenizer(config.reader_encoder)
    table = blocks.read_table("blocks", ["block_id", "doc_id", "title", "text"])
    examples = list(iter_examples(blocks, spans, masking, tokenizer, counts, blocks_encoder))
    train, heldout = split_heldout(examples, config.heldout_every, config.eval_examples, config.seed)
    return PretrainData(train, heldout, BlockTexts.from_table(table), tokenizer)


def _inputs(blocks_ref: ArtifactRef, spans_ref: ArtifactRef, retriever_ref: ArtifactRef | None,
            config: PretrainConfig, masking: MaskingConfig, embed: EmbedConfig, index_config: IndexConfig,
            reader_start: ArtifactRef | None) -> dict[str, str]:
    """What the stage's cache key hashes besides its config."""
    inputs = {"blocks": blocks_ref.content_hash, "spans": spans_ref.content_hash,
              "retriever": retriever_ref.content_hash if retriever_ref else "none",
              "reader": encoder_hash(config.reader_encoder), "masking": masking.config_hash(),
              "embed": embed.config_hash(), "index": index_config.config_hash(),
              "code": code_version((__name__,), ("torch", "transformers"))}
    if reader_start is not None:
        inputs["reader_start"] = reader_start.content_hash
    if config.fresh_encoder is not None and retriever_ref is None:  # hashed by content: a moved copy hits
        inputs["fresh_encoder"] = encoder_hash(config.fresh_encoder)
    return inputs


def _reader(store: ArtifactStore, blocks_ref: ArtifactRef, config: PretrainConfig, placement: Placement,
            progress: Progress | None, reader_start: ArtifactRef | None) -> tuple[Any, dict[str, Any] | None, str]:
    """The knowledge-augmented encoder pretraining starts from (the reader warm start's artifact,
    else the masked-LM warm-up's, else `pretrain.reader_encoder`), what it was and its report."""
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder

    source, report = config.reader_encoder, ""
    stats: dict[str, Any] | None = None
    if reader_start is not None:
        source = str(Path(reader_start.path) / "reader")
        stats = {"artifact": reader_start.path, "kind": reader_start.kind}
    elif (warmup := run_warm_reader(store, blocks_ref, config, placement, progress)) is not None:
        source = reader_mlm_dir(warmup.ref)
        stats = {"artifact": warmup.ref.path, "cached": warmup.cached, **warmup.stats}
        report = warmup.report + "\n\n"
    return KnowledgeAugmentedEncoder.from_pretrained(source, dropout=config.dropout, seed=config.seed), stats, report


class RunIndex:
    """A run's own index namespace, `<root>/runs/pretrain-<key>/`: its encoder snapshots and
    index versions v<step>. The first version is the warm start's encoders' (their embeddings
    cached in the main store); later ones are refreshes (`refresh_index(embed, run_root)`, else
    the retrieval stages called directly)."""

    def __init__(self, store: ArtifactStore, key: str, blocks_ref: ArtifactRef, retriever_ref: ArtifactRef | None,
                 config: PretrainConfig, embed: EmbedConfig, index_config: IndexConfig,
                 refresh_index: RefreshIndex | None, base_step: int, dim: int) -> None:
        self.store, self.blocks_ref, self.retriever_ref = store, blocks_ref, retriever_ref
        self.config, self.embed, self.index_config, self.refresh_index = config, embed, index_config, refresh_index
        self.base_step, self.dim = base_step, dim
        self.root = Path(store.root) / "runs" / f"pretrain-{key}"
        self.versions = ArtifactStore(self.root)

    def has(self, step: int) -> bool:
        return (self.root / "index" / f"v{step:08d}").is_dir()

    def build(self, q: RetrieverEncoder, d: RetrieverEncoder, step: int) -> IndexHandle:
        """Embed the blocks with `d` (snapshotted beside `q`) and open the index version `step`."""
        if step == self.base_step and self.retriever_ref is not None:
            doc_dir = doc_encoder_dir(self.retriever_ref)  # the warm start's own: its embeddings are cached
        else:
            snapshot = self.root / "encoders" / f"step-{step:08d}"
            for name, enc in (("query_encoder", q), ("doc_encoder", d)):
                enc.step = step
                if not (snapshot / name / "realm_retriever.json").is_file():
                    enc.save_pretrained(snapshot / name, tokenizer_source=self.config.reader_encoder)
            doc_dir = str(snapshot / "doc_encoder")
        snapshot_embed = self.embed.model_copy(update={"doc_encoder": doc_dir})
        if self.refresh_index is not None:
            self.refresh_index(snapshot_embed, str(self.root))
        else:
            emb = run_embed_blocks(self.store, self.blocks_ref, snapshot_embed)
            run_build_index(self.store, emb.ref, self.blocks_ref, self.index_config, index_store=self.versions)
        return self.at(step)

    def at(self, step: int) -> IndexHandle:
        """Index version `step`, checked against the blocks and the query embedding's dimension."""
        index, art = load_index(self.versions, step)
        art.made_from(blocks=self.blocks_ref)
        if index.dim != self.dim:
            raise ConfigError(f"{art.path}: index dimension {index.dim} != query embedding dimension {self.dim}")
        return IndexHandle(index, step)


def _publish(cache: CachedStage, reader: Any, encoders: tuple[RetrieverEncoder, RetrieverEncoder],
             data: PretrainData, curves: Curves,
             rows: list[dict[str, Any]], stats: dict[str, Any], report: str, config: PretrainConfig,
             counts: Counter[str], step: int) -> None:
    """The realm_model artifact: reader (with the blocks' tokenizer), both encoders at `step`, the
    curves, the held-out rows, the plot, stats and report."""
    for encoder in encoders:
        encoder.step = step
    publish_trained(cache, reader=reader, tokenizer=data.tokenizer,
                    encoders=dict(zip(("query_encoder", "doc_encoder"), encoders, strict=True)),
                    tokenizer_source=config.reader_encoder,
                    tables={"pretrain_metrics": [{k: r.get(k, 0.0) for k in r} for r in curves.steps],
                            "pretrain_eval": curves.evals, "pretrain_heldout": rows},
                    plot=Plot("pretrain_curves.png", curves.steps, "step", ["loss", "retrieval_utility", "p_null"],
                              f"REALM pretraining ({config.retrieval})"),
                    manifest={"stats": stats, "report": report, "step": step, "example_counts": dict(counts)})


def run_pretrain(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef,
                 retriever_ref: ArtifactRef | None, config: PretrainConfig, masking: MaskingConfig,
                 embed: EmbedConfig, index_config: IndexConfig, progress: Progress | None = None,
                 force: bool = False, refresh_index: RefreshIndex | None = None,
                 chunk_encoder: str | None = None, reader_start: ArtifactRef | None = None) -> StageResult:
    """Pretrain; `reader_start`, given, is the reader warm start's artifact the reader starts from
    (else the masked-LM warm-up's, or `pretrain.reader_encoder` itself where that is off);
    `refresh_index(embed, index_root)` re-embeds the blocks with `embed.doc_encoder` and builds
    the new index version under `index_root` (default: the retrieval stages called directly; the
    Prefect flow passes its refresh-index subflow). `chunk_encoder` (the config's `chunk.encoder`)
    is where the blocks' tokenizer is now, tried before the reader's and the path the blocks
    record to read their wordpieces again."""
    if (config.warm_start == "none") != (retriever_ref is None):
        raise ConfigError(f"pretrain.warm_start={config.warm_start!r} but a retriever artifact was "
                          f"{'given' if retriever_ref else 'not given'}")
    cache = CachedStage(store, KIND, config, _inputs(blocks_ref, spans_ref, retriever_ref, config, masking, embed,
                                                     index_config, reader_start), force)
    if cache.hit:
        return cache.hit
    blocks, spans = open_mined(store, blocks_ref, spans_ref)
    _check_compatible(config, retriever_ref, blocks, _blocks_encoder(blocks, config, chunk_encoder))
    placement = Placement.from_env(config.device, config.precision)
    if config.batch_size % placement.world_size:
        raise ConfigError(f"pretrain.batch_size={config.batch_size} does not split evenly over "
                          f"{placement.world_size} ranks")
    query_encoder, doc_encoder = _encoders(config, retriever_ref)
    reader, reader_stats, reader_report = _reader(store, blocks_ref, config, placement, progress, reader_start)
    base_step, counts = query_encoder.step, Counter[str]()
    data = pretrain_data(blocks, spans, config, masking, chunk_encoder, counts)
    if len(data.train) < config.batch_size or not data.heldout:
        raise RealmError(f"{spans.path}: {len(data.train)} training and {len(data.heldout)} held-out masked "
                         f"examples; need at least batch_size={config.batch_size} and one held out")
    index = RunIndex(store, cache.key, blocks_ref, retriever_ref, config, embed, index_config, refresh_index,
                     base_step, query_encoder.projection_dim)
    retrieving = config.retrieval == "realm"
    if retrieving and placement.is_main and not index.has(base_step):
        index.build(query_encoder, doc_encoder, base_step)
    placement.barrier()
    refresher = (IndexRefresher(index.build, config.sync_refresh)
                 if retrieving and not config.freeze_retriever and placement.is_main else None)
    t0 = time.perf_counter()
    try:
        curves = train_realm(RealmModels(reader, query_encoder, doc_encoder), data, config, index.at if retrieving else None, refresher, base_step,
                             cache.checkpoints, progress or NoProgress(), placement=placement)
    finally:
        if refresher is not None:
            refresher.close()
    if not placement.is_main:
        return rank_zero_artifact(placement, cache)
    rows = heldout_rows(curves, data, config)
    stats = pretrain_stats(curves, data, rows, config, masking, refresher, time.perf_counter() - t0, placement,
                           reader_stats)
    _publish(cache, reader, (query_encoder, doc_encoder), data, curves, rows, stats, pretrain_report(curves, stats, config, reader_report),
             config, counts, base_step + config.steps)
    placement.barrier()
    return cache.result()
