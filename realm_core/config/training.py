"""Configs of the stages that train: the ICT and RetroMAE warm starts, REALM pretraining (with
its reader warm-up) and open-QA fine-tuning."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from realm_core.config.stage import (
    BUNDLED_ENCODER,
    DEVICE_DEFAULT,
    DEVICE_HELP,
    PRECISION_HELP,
    StageConfig,
)


class OptimizerSettings(StageConfig):
    """What every stage that trains shares: AdamW's weight decay and clipping, dropout, logging,
    the seed and where it runs. A trainer's own rate, steps and checkpoints: `TrainerConfig`."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})

    weight_decay: float = Field(0.01, ge=0, description="AdamW's, never on biases and LayerNorm weights")
    max_grad_norm: float = Field(1.0, gt=0, description="gradients clipped to this norm")
    dropout: float = Field(0.1, ge=0, lt=1, description="BERT hidden+attention dropout while training")
    log_every: int = Field(10, ge=1, description="steps between progress lines")
    seed: int = Field(0, description="batches, masks and dropout are functions of (seed, step)")
    device: str = Field(DEVICE_DEFAULT, description=DEVICE_HELP)
    precision: Literal["fp32", "bf16", "auto"] = Field("fp32", description=PRECISION_HELP)


class TrainerConfig(OptimizerSettings):
    """A training stage's own run: its peak rate with linear warm-up and decay, its steps, and
    how often it checkpoints (a killed run resumes from the newest checkpoint)."""

    learning_rate: float = Field(1e-4, gt=0, description="peak rate")
    warmup_steps: int = Field(0, ge=0)
    steps: int = Field(100_000, ge=1)
    checkpoint_every: int = Field(50, ge=1, description="steps between resumable checkpoints")


class ICTConfig(TrainerConfig):
    """Inverse Cloze Task warm start of the retriever (ORQA; REALM §3.4)."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "micro_batch", "device"})
    # The stages hash the encoder's weights and configs (`encoder_hash`), not its path: a moved copy hits the cache.
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset({"encoder"})

    encoder: str = Field(BUNDLED_ENCODER, description="BERT both encoders start from")
    projection_dim: int = Field(128, ge=0, description="size of the head over the pooled state (ORQA: 128); "
                                "0: no head, the pooled state itself")
    batch_size: int = Field(4096, ge=2, description="examples per step; the others are in-batch negatives")
    micro_batch: int = Field(0, ge=0, description=(
        "examples a forward/backward holds at once (0: the whole batch); below the batch size, "
        "memory follows the micro-batch at the cost of a second forward (GradCache), with the "
        "whole batch's loss and gradients"))
    keep_sentence_prob: float = Field(0.1, ge=0, le=1, description="ORQA: keep the query in 10%")
    min_sentence_chars: int = Field(20, ge=1, description="shorter sentences are not used as queries")
    query_length: int = Field(64, ge=8)
    block_length: int = Field(288, ge=16)


class RetroMAEConfig(TrainerConfig):
    """RetroMAE warm start (Xiao et al. 2022): masked auto-encoding through a [CLS] bottleneck."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})
    # The stages hash the encoder's weights and configs (`encoder_hash`), not its path: a moved copy hits the cache.
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset({"encoder"})

    encoder: str = Field(BUNDLED_ENCODER, description="BERT the encoder starts from")
    projection_dim: int = Field(0, ge=0, description="0: the [CLS] state itself (RetroMAE's embedding)")
    encoder_mask_rate: float = Field(0.3, ge=0.0, le=0.9, description="RetroMAE: 15-30%")
    decoder_mask_rate: float = Field(0.5, ge=0.0, le=0.95, description="RetroMAE: 50-70%")
    enhanced_decoding: bool = Field(True, description="two streams + per-row attention mask; "
                                    "false: one masked stream (the ablation)")
    batch_size: int = Field(256, ge=1)
    block_length: int = Field(288, ge=16)


class ReaderMlmConfig(StageConfig):
    """Masked-LM warm-up of the REALM reader on the blocks, before REALM starts. REALM starts its
    reader from BERT, which already does masked LM; an encoder shipped without an MLM head (the
    bundled MiniLM) starts with none, and salient spans alone teach it next to nothing."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every"})

    steps: int = Field(0, ge=0, description="0: the reader starts from pretrain.reader_encoder as it is")
    batch_size: int = Field(32, ge=1, description="blocks per step")
    length: int = Field(128, ge=8, description="[CLS] title [SEP] body [SEP], cut to this many wordpieces")
    mask_rate: float = Field(0.15, gt=0, lt=1, description="BERT: 15% of wordpieces, 80% [MASK] / 10% random / 10% kept")
    learning_rate: float = Field(5e-4, gt=0)
    warmup_steps: int = Field(30, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    checkpoint_every: int = Field(50, ge=1)
    seed: int = 0


class ReaderCopyConfig(StageConfig):
    """The reader's warm start between its masked-LM warm-up and REALM: trained to predict each
    training example's masked span reading one block that holds it (the allowed holder the
    warm-started retriever scores highest), so that REALM's marginal likelihood starts from a
    reader that copies from retrieved blocks. From a reader that does not, every REALM run on the
    demo corpus collapsed onto the null block; from one that does, REALM gained over null-only
    (docs/experiments/realm-gain.md). Blocks and examples of held-out articles are never read."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every"})

    steps: int = Field(0, ge=0, description="0: off; pretraining starts from the masked-LM warm-up's reader")
    batch_size: int = Field(16, ge=1, description="examples per step, each read with its one holder block")
    learning_rate: float = Field(1e-4, gt=0, description="peak rate")
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    pool: int = Field(3, ge=1, description="training examples searched for a holder block: this many "
                      "times steps x batch_size, drawn in a seeded order")
    eval_every: int = Field(0, ge=0, description="steps between readings of the recoverable held-out "
                            "examples with their holder block and with the null block (the stage's curve); "
                            "0: once, at the end")
    checkpoint_every: int = Field(50, ge=1)


class GainConfig(StageConfig):
    """REALM against its null-only baseline: both pretraining runs, the same batches and held-out
    spans, compared in one report (held-out accuracy on all and on recoverable spans, paired over
    articles; where REALM's retriever now puts the span-holding block; zero-shot recall)."""

    enabled: bool = Field(False, description="run null-only pretraining beside REALM's and compare them")
    resamples: int = Field(10_000, ge=100, description="bootstrap resamples of articles (or questions)")
    zero_shot: bool = Field(True, description="SQuAD-open dev recall@5/@20 before and after REALM, paired")


class PretrainConfig(TrainerConfig):
    """REALM pretraining (Guu et al. 2020 §3-§4). The masked queries come from `masking`."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})
    # The stages hash the encoder's weights and configs (`encoder_hash`), not its path: a moved copy hits the cache.
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset({"reader_encoder", "fresh_encoder"})

    warm_start: Literal["ict", "retromae", "none"] = Field(
        "ict", description="initial query/document encoders: a warm-start artifact, or fresh heads")
    fresh_projection_dim: int = Field(
        128, ge=0, description="warm_start none: the size of the fresh heads over both encoders' [CLS] "
        "state (seeded); 0: the [CLS] state itself, no head")
    reader_encoder: str = Field(BUNDLED_ENCODER, description="BERT the knowledge-augmented encoder starts from")
    fresh_encoder: str | None = Field(
        None, description="warm_start none: the BERT both retriever encoders start from (None: reader_encoder, "
        "as the paper); set it where the reader starts from a trained reader whose [CLS] state is no "
        "sentence embedding, e.g. a copy-trained one")
    reader_mlm: ReaderMlmConfig = Field(default_factory=ReaderMlmConfig,
                                        description="masked-LM warm-up of the reader on the blocks first")
    reader_copy: ReaderCopyConfig = Field(default_factory=ReaderCopyConfig,
                                          description="then the reader taught to copy a span from a block that holds it")
    retrieval: Literal["realm", "null_only"] = Field(
        "realm", description="null_only: the null block alone, i.e. BERT-style MLM (Table 2 baseline)")
    freeze_retriever: bool = Field(False, description="Table 2 ablation: no gradient into either encoder")
    relevance: Literal["recompute", "index"] = Field(
        "recompute", description="recompute: retrieved blocks re-embedded by the current document "
        "encoder (gradients reach it); index: their stale index vectors (only the query encoder "
        "and the null block's embedding learn; a step costs far less)")
    top_k: int = Field(8, ge=1, description="blocks per example, the null block included")
    reader_length: int = Field(384, ge=16, description="[CLS] x [SEP] title [SEP] body [SEP]")
    doc_length: int = Field(288, ge=8, description="block tokens when relevance is recomputed")
    batch_size: int = Field(512, ge=1, description="examples per optimizer step")
    grad_accumulation: int = Field(1, ge=1, description="micro-batches per step (batch_size each / this); the "
                                   "held-out evaluation reads in the same micro-batches, so memory follows them")
    learning_rate: float = Field(3e-5, gt=0)
    retriever_lr_scale: float = Field(
        1.0, gt=0, description="the encoders' learning rate as a multiple of learning_rate (the "
        "paper: 1). Below 1 on short runs, where the reader has not yet learned to use retrieval "
        "and the retriever's gradient is mostly noise that erodes the warm start")
    retriever_frozen_steps: int = Field(
        0, ge=0, description="first steps with no gradient into either encoder (Atlas: "
        "--freeze_retriever_steps), while the reader learns to read what the warm-started retriever "
        "returns; the encoders train from then on at retriever_lr_scale, and the index is refreshed")
    null_weight: float | None = Field(
        None, gt=0, lt=1, description="the null block's fixed share of the marginal likelihood, the "
        "retriever's softmax taken over the retrieved blocks alone: its gradient then ranks the retrieved "
        "blocks against each other and can never move mass to the null block (on the demo corpus, where "
        "the blocks ICT retrieves mostly lack the span, every run with a scored null block collapsed onto "
        "it: docs/experiments/realm-gain.md). None: the null block scored like any block, as the paper")
    steps: int = Field(200_000, ge=1)
    warmup_steps: int = Field(10_000, ge=0)
    refresh_every: int = Field(500, ge=1, description="steps between index refreshes (x30: Table 2's stale index)")
    sync_refresh: bool = Field(False, description=(
        "wait for each refresh: deterministic, and the refresh's corpus embedding never holds memory "
        "beside a backward pass (the demo's peak); false: training goes on while it embeds"))
    exclusion: Literal["block", "article"] = Field(
        "block", description="trivial retrievals dropped: the query's own block and its article's "
        "copies in other corpora (REALM §3.4), or every block of its article")
    exclusion_margin: int = Field(16, ge=0, description="extra index hits fetched to replace trivial ones")
    heldout_every: int = Field(50, ge=2, description="articles with hash % N == 0 are held out for eval")
    eval_every: int = Field(1000, ge=1)
    eval_examples: int = Field(256, ge=1)
    checkpoint_every: int = Field(1000, ge=1)


class ReaderBudget(StageConfig):
    """One phase of open-QA reader training: how long, how fast, and when to stop."""

    steps: int = Field(2_000, ge=0, description="optimizer steps (0: the phase is skipped)")
    batch_size: int = Field(16, ge=1, description="questions per step, in epoch order")
    learning_rate: float = Field(1e-5, gt=0, description="the reader's peak rate")
    warmup_steps: int = Field(100, ge=0)
    eval_every: int = Field(0, ge=0, description="steps between dev exact-match evaluations; the best "
                            "weights are kept (0: no evaluation, the last weights)")
    patience: int = Field(0, ge=0, description="evaluations without a gain before stopping (0: never)")
    group_by_length: bool = Field(False, description="gold-paragraph phase: batches of paragraphs of similar "
                                  "length (each epoch's seeded order cut into pools of 50 batches, each pool "
                                  "sorted by row length), so rows pad to their own batch's longest, not to a "
                                  "random batch's")
    seed: int = 0


class SpanReaderConfig(OptimizerSettings):
    """The span reader and its first training phase, on each training question's gold passage
    (`gold_passage`, DPR's reader phase): every field the gold-paragraph stages read, and only
    those, so their cache key holds exactly what they depend on. `FinetuneConfig` adds the
    open-domain phase; the gold stages are given this part of it (`FinetuneConfig.span_reader`)."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})

    dataset: str = Field("squad-open", description="questions table dataset to train on")
    split: Literal["train", "dev", "test"] = "train"
    dev_split: Literal["train", "dev", "test"] = Field("dev", description="split for checkpoint selection")
    dev_questions: int = Field(300, ge=1, description="dev questions evaluated for selection")
    form: Literal["joint", "per_block"] = Field(
        "joint", description="joint: one softmax over every (block, span) with the retrieval logit "
        "added (ORQA); per_block: spans normalised within a block, times p(z|x) (REALM §3.3)")
    gold_passage: ReaderBudget = Field(
        default_factory=lambda: ReaderBudget(steps=0),
        description="reader training on the gold passages first (0 steps: none)")
    reader_length: int = Field(384, ge=32, description="[CLS] question [SEP] title [SEP] body [SEP]; "
                               "question_length + the chunk length reads every block whole")
    question_length: int = Field(64, ge=8)
    max_span_length: int = Field(20, ge=1, description="answer spans up to this many wordpieces (how many "
                                 "answers each limit holds: experiments/answer_lengths.py)")
    checkpoint_every: int = Field(100, ge=1)

    @property
    def min_reader_length(self) -> int:
        """The shortest reader row that holds a whole question, a title separator and one body
        wordpiece: `[CLS] question [SEP] x [SEP] body [SEP]`."""
        return self.question_length + 4

    def train_temperature(self, retriever: str) -> float | None:
        """The retrieval temperature while training: a dense retriever learns its own scale (1);
        a fixed one (BM25) gives uniform p(z|x), its temperature being fit on dev at evaluation."""
        return 1.0 if retriever == "dense" else None


class FinetuneConfig(SpanReaderConfig):
    """Open-QA fine-tuning (REALM §3.4): the document encoder and its index frozen, the query
    encoder and the span reader trained to maximise p(y|x) over the top-k retrieved blocks.

    The reader first reads each training question's gold passage (the `SpanReaderConfig` part,
    one cached reader per reader start, shared by the systems), then each system trains on its
    own retrieval for `steps`."""

    reader_start: Literal["encoder", "reader_mlm"] = Field(
        "encoder", description="where the baselines' span readers start: pretrain.reader_encoder "
        "itself, or after the reader masked-LM warm-up (REALM's reader always starts from REALM)")
    top_k: int = Field(5, ge=1, description="retrieved blocks per question (REALM: 5)")
    batch_size: int = Field(16, ge=1, description="questions per step, in epoch order")
    learning_rate: float = Field(1e-5, gt=0, description="the reader's peak rate")
    query_learning_rate: float = Field(1e-5, gt=0, description="the query encoder's peak rate (ORQA/REALM: 1e-5)")
    warmup_steps: int = Field(100, ge=0)
    eval_every: int = Field(0, ge=0, description="steps between dev evaluations (0: none)")
    patience: int = Field(0, ge=0, description="evaluations without a gain before stopping (0: never)")
    steps: int = Field(2_000, ge=0, description="open-domain steps on the system's own retrieval")
    train_query_encoder: bool = Field(True, description="False: the retriever stays as warm-started")

    def span_reader(self) -> SpanReaderConfig:
        """The gold-paragraph stages' part of this config: the fields `SpanReaderConfig` declares."""
        return SpanReaderConfig.model_validate(self.model_dump(include=set(SpanReaderConfig.model_fields)))

    def budget(self) -> ReaderBudget:
        """The open-domain phase's budget."""
        return ReaderBudget(steps=self.steps, batch_size=self.batch_size, learning_rate=self.learning_rate,
                            warmup_steps=self.warmup_steps, eval_every=self.eval_every,
                            patience=self.patience, seed=self.seed)

    def query_rate(self) -> float | None:
        """The query encoder's peak rate in the open phase; None: it stays as warm-started."""
        return self.query_learning_rate if self.train_query_encoder else None
