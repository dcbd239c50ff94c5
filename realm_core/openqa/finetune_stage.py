"""The open-QA stages (REALM Table 1): train a span reader on gold passages (`qa_reader`, one per
reader start), fine-tune each system on its own retrieval from it (`openqa_model`), then
evaluate systems side by side (`openqa_eval`: exact match and F1 on the full split and on its
answerable subset, recall@k of the retrieved blocks and of the text the reader read, the
gold-paragraph reader's ceiling, paired differences with intervals, every prediction).

A system is a retriever + a reader start:

| system          | retrieval                      | reader starts from                        |
|-----------------|--------------------------------|-------------------------------------------|
| no retrieval    | none (null block only)         | the baseline reader                       |
| BM25 + reader   | bm25s, its scores as logits    | the baseline reader                       |
| ICT (ORQA-like) | ICT encoders, index frozen     | the baseline reader                       |
| REALM           | REALM's encoders, index frozen | REALM's knowledge-augmented encoder       |

Two more rows cross retriever and reader start, so that what REALM pretraining does for the
retriever and for the reader separate (the 2x2 of ICT or REALM encoders x baseline or REALM
reader): `ict_realm_reader` (ICT's encoders, REALM's reader) and `realm_baseline_reader`
(REALM's encoders, the baseline reader). They share the gold-paragraph phase of their reader
start with the rows above, so they cost an open phase and an evaluation each. A last row,
`ict_null_reader`, reads with the reader of the same pretraining run on the null block alone
(REALM Table 2's BERT baseline, stage `pretrain_null`) behind ICT's encoders: set beside
`ict_realm_reader`, it says what retrieval during pretraining gave the reader beyond the masked
LM itself. It has a reader start of its own, so it costs a gold-paragraph phase too.

The baseline reader plays BERT's part in the paper (ORQA's reader starts from BERT, REALM's from
BERT + REALM pretraining): `pretrain.reader_encoder`, or the reader masked-LM warm-up REALM
itself starts from (`finetune.reader_start`). Every system gets the same budgets; each
retrieving system's temperature is fit on dev questions, never on test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from realm_core.config import (
    BUNDLED_ENCODER,
    EmbedConfig,
    FinetuneConfig,
    PretrainConfig,
    SpanReaderConfig,
)
from realm_core.curves import curve_markdown
from realm_core.errors import ConfigError
from realm_core.openqa.finetune import FinetuneCurves, train_reader
from realm_core.openqa.predict import QAModels
from realm_core.openqa.reading import BlockStore, QAQuestion
from realm_core.progress import Progress
from realm_core.retrieval.retrievers import RETRIEVERS, Retriever, Sources
from realm_core.store.artifacts import Artifact, ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.systems import SYSTEMS
from realm_core.training import Plot, publish_trained

READER_KIND = "qa_reader"
MODEL_KIND = "openqa_model"
EVAL_KIND = "openqa_eval"
CURVE_COLUMNS = ("step", "loss", "dev_em", "with_gold", "learning_rate")
GOLD_SYSTEM = "gold paragraph reader"
NOTE_SMALL_CORPUS = ("NQ, WebQuestions and CuratedTREC were written against all of Wikipedia; "
                     "over a small corpus most answers are absent, so compare systems on the "
                     "answerable subset and expect paper-level numbers only from the full dump "
                     "(paper preset).")


@dataclass(frozen=True)
class QASystem:
    key: str                             # the registry's (realm_core.systems)
    name: str
    retrieval: Literal["dense", "bm25", "none"]
    reader: str                          # BERT directory the span reader starts from
    query_encoder: str | None = None     # dense: the (trainable) query encoder
    doc_embed: EmbedConfig | None = None  # dense: the frozen document encoder's block embeddings
    note: str = ""

    def spec(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "retrieval": self.retrieval, "reader": self.reader,
                "query_encoder": self.query_encoder, "note": self.note,
                "doc_embed": self.doc_embed.model_dump(mode="json") if self.doc_embed else None}

    def hashes(self) -> dict[str, str]:
        """What a cache key holds of this system: its settings and its encoders' content, never
        their paths (which are often artifacts' and change when the store is copied)."""
        from realm_core.retrieval.stage import encoder_hash

        settings = {"key": self.key, "name": self.name, "retrieval": self.retrieval,
                    "doc_embed": self.doc_embed.config_hash() if self.doc_embed else None}
        out = {"system": str(settings), "reader": encoder_hash(self.reader)}
        if self.query_encoder is not None and self.doc_embed is not None:
            out |= {"query_encoder": encoder_hash(self.query_encoder),
                    "doc_encoder": encoder_hash(self.doc_embed.doc_encoder)}
        return out



def qa_systems(ict_ref: ArtifactRef | None, realm_ref: ArtifactRef | None, embed: EmbedConfig,
               encoder: str = BUNDLED_ENCODER, null_ref: ArtifactRef | None = None) -> list[QASystem]:
    """The systems of the registry (`realm_core.systems`) that the given artifacts allow,
    in its order; `encoder` is the baseline reader (see the module docstring), `realm_ref` REALM
    pretraining's artifact, `null_ref` the null-only pretraining run's."""
    encoders = {"ict": ict_ref, "pretrain": realm_ref}
    readers = {"baseline": encoder, "realm": f"{realm_ref.path}/reader" if realm_ref else None,
               "null": f"{null_ref.path}/reader" if null_ref else None}
    systems = []
    for kind in SYSTEMS:
        reader = readers[kind.reader]
        ref = encoders[kind.encoders] if kind.encoders else None
        if reader is None or (kind.encoders is not None and ref is None):
            continue
        query = f"{ref.path}/query_encoder" if ref else None
        docs = embed.model_copy(update={"doc_encoder": f"{ref.path}/doc_encoder"}) if ref else None
        systems.append(QASystem(kind.key, kind.name, kind.retrieval, reader, query, docs, kind.note))
    return systems


def baseline_reader(warm_reader: ArtifactRef | None, pretrain: PretrainConfig, finetune: FinetuneConfig) -> str:
    """The BERT directory the baselines' span readers start from: `pretrain.reader_encoder`, or
    the reader masked-LM warm-up's (`warm_reader`, the run_warm_reader artifact) when
    `finetune.reader_start` asks for it and the preset has one."""
    from realm_core.pretrain.reader_mlm import reader_mlm_dir

    if finetune.reader_start == "reader_mlm" and warm_reader is not None:
        return reader_mlm_dir(warm_reader)
    return pretrain.reader_encoder


def load_questions(store: ArtifactStore, questions_ref: ArtifactRef, dataset: str, split: str,
                   limit: int | None = None, blocks: BlockStore | None = None) -> list[QAQuestion]:
    """One dataset's split; with `blocks`, each question's gold passage (SQuAD) is added to them
    and its id recorded, for the gold-passage reader."""
    art = store.open(questions_ref, kind="questions")
    table = art.read_table("questions").to_pylist()
    rows = [r for r in table if r["dataset"] == dataset and r["split"] == split]
    if not rows:
        have = sorted({f"{r['dataset']}/{r['split']}" for r in table})
        raise ConfigError(f"{art.path}: no {dataset}/{split} questions; the questions stage holds "
                          f"{', '.join(have)} (add a source to `questions.sources`)")
    out = []
    for r in rows[:limit]:
        passage = blocks.add_passage(r["title"] or "", r["context"]) if blocks is not None and r.get("context") else None
        out.append(QAQuestion(r["qid"], r["question"], tuple(r["answers"]), r["match"], passage))
    return out


def _blocks(store: ArtifactStore, blocks_ref: ArtifactRef | None, tokenizer: Any) -> BlockStore:
    if blocks_ref is None:
        return BlockStore([], [], tokenizer)
    table = store.open(blocks_ref, kind="blocks").read_table("blocks", ["title", "text"])
    return BlockStore(table.column("title").to_pylist(), table.column("text").to_pylist(), tokenizer)


def _retriever(store: ArtifactStore, blocks_ref: ArtifactRef, system: QASystem, blocks: BlockStore,
               query_encoder: Any, tokenizer: Any, config: FinetuneConfig) -> Retriever:
    """The system's retriever, built by its class in `RETRIEVERS`."""
    sources = Sources(store, blocks_ref, system.doc_embed, query_encoder, tokenizer, config.question_length)
    return RETRIEVERS[system.retrieval].build(blocks, config.top_k, sources)


def _check_reader_length(config: SpanReaderConfig) -> None:
    if config.reader_length < config.min_reader_length:
        raise ConfigError(f"finetune.reader_length {config.reader_length} cannot hold a question of "
                          f"finetune.question_length {config.question_length} and one body wordpiece "
                          f"(at least {config.min_reader_length})")


def _curve(rows: list[dict[str, Any]]) -> str:
    """The curve's markdown over the columns every row has (dev EM only where evaluated)."""
    if not rows:
        return "no steps"
    return curve_markdown(rows, tuple(c for c in CURVE_COLUMNS if all(r.get(c) is not None for r in rows)))


def _budget_stats(curves: FinetuneCurves, n_questions: int) -> dict[str, Any]:
    seen = int(sum(r["questions"] for r in curves.steps))
    tokens = [r.get("row_tokens", 0) for r in curves.steps]
    return {"steps_run": len(curves.steps), "examples_seen": seen,
            "mean_row_tokens": round(float(np.mean(tokens)), 1) if tokens else 0.0,
            "no_gold_span": int(sum(r.get("no_gold_span", 0) for r in curves.steps)),
            "epochs": round(seen / max(n_questions, 1), 3),
            "wall_seconds": round(curves.steps[-1]["wall_seconds"], 1) if curves.steps else 0.0,
            "best_dev_em": curves.best_dev_em, "best_step": curves.best_step, "stopped_early": curves.stopped_early,
            "dev_curve": [[r["step"], r["dev_em"]] for r in curves.steps if r["dev_em"] is not None]}


def run_gold_reader(store: ArtifactStore, questions_ref: ArtifactRef, reader_start: str, config: SpanReaderConfig,
                    progress: Progress | None = None, force: bool = False) -> StageResult | None:
    """The span reader trained on each training question's gold passage (`finetune.gold_passage`,
    DPR's reader phase), checkpoint chosen by dev exact match on the dev questions' gold
    passages: the first phase of fine-tuning, a graph stage of its own for each reader start
    (`gold_reader*`). Independent of the systems' retrievers and of the corpus, so one artifact
    per reader start serves every system. Keyed by `config`, the span reader's part of the
    finetune section, so the open phase's budget never moves it. None when the phase has no
    steps."""
    from realm_core.bert import load_tokenizer
    from realm_core.distributed import Placement, resolve_device
    from realm_core.openqa.span_reader import SpanReader
    from realm_core.retrieval.retrievers import GoldPassage
    from realm_core.retrieval.stage import encoder_hash

    budget = config.gold_passage
    if budget.steps == 0:
        return None
    _check_reader_length(config)
    inputs = {"questions": questions_ref.content_hash, "reader": encoder_hash(reader_start),
              "code": code_version((__name__,), ("torch", "transformers", "bm25s"))}
    cache = CachedStage(store, READER_KIND, config, inputs, force)
    if cache.hit:
        return cache.hit
    tokenizer = load_tokenizer(reader_start)
    blocks = _blocks(store, None, tokenizer)
    questions = [q for q in load_questions(store, questions_ref, config.dataset, config.split, blocks=blocks)
                 if q.passage is not None]
    if not questions:
        raise ConfigError(f"{config.dataset}/{config.split} questions have no gold passages (SQuAD sources "
                          "do); set finetune.gold_passage.steps=0")
    dev = [q for q in load_questions(store, questions_ref, config.dataset, config.dev_split,
                                     config.dev_questions, blocks=blocks) if q.passage is not None]
    reader = SpanReader.from_pretrained(reader_start, config.max_span_length, config.dropout, config.seed)
    models = QAModels(reader, None)
    checkpoints = cache.checkpoints
    retriever = GoldPassage(blocks, 1)
    # one process trains it (a graph stage: under torchrun rank 0, while the others wait for the
    # artifact), so a placement of its own: `finetune.device` and `finetune.precision`
    placement = Placement(resolve_device(config.device), config.precision)
    curves = train_reader(models, retriever, questions, blocks, tokenizer, config, budget,
                          checkpoints, dev, progress, placement)
    stats = {"reader_start": reader_start, "train_questions": len(questions), "dev_questions": len(dev),
             "device": str(placement.device), "precision": placement.precision,
             **_budget_stats(curves, len(questions))}
    report = (f"### gold-passage reader from {reader_start}\n\n"
              + _curve([r for r in curves.steps if r["dev_em"] is not None] or curves.steps))
    return publish_trained(cache, reader=reader, tokenizer=tokenizer,
                           tables={"finetune_curve": [{**r, "phase": "gold_passage"} for r in curves.steps]},
                           manifest={"stats": stats, "report": report})


def gold_reader_of(store: ArtifactStore, gold_ref: ArtifactRef | None, reader_start: str) -> Artifact | None:
    """The gold-paragraph reader artifact, checked to have been trained from `reader_start` (the
    system's own reader start: the graph gives each system the gold stage of its start)."""
    from realm_core.retrieval.stage import encoder_hash

    if gold_ref is None:
        return None
    gold = store.open(gold_ref, kind=READER_KIND)
    if gold.manifest["inputs"].get("reader") != encoder_hash(reader_start):
        raise ConfigError(f"{gold.path}: this gold-paragraph reader was trained from another reader start than "
                          f"{reader_start}")
    return gold


def run_finetune(store: ArtifactStore, blocks_ref: ArtifactRef, questions_ref: ArtifactRef,
                 system: QASystem, gold_ref: ArtifactRef | None, config: FinetuneConfig,
                 progress: Progress | None = None, force: bool = False) -> StageResult:
    """A system's fine-tuned reader and query encoder: from its gold-paragraph reader (`gold_ref`,
    the first phase's artifact, shared by the systems of one reader start; None when that phase
    has no steps: the reader start itself), `config.steps` on its own top-k blocks."""
    from realm_core.bert import load_tokenizer
    from realm_core.distributed import Placement, rank_zero_artifact
    from realm_core.openqa.span_reader import SpanReader
    from realm_core.retrieval.encoders import RetrieverEncoder

    kind = RETRIEVERS[system.retrieval]
    if not kind.retrieves:
        raise ConfigError(f"{system.name}: a system that retrieves nothing has no span to learn from; "
                          "it is evaluated as it is")
    _check_reader_length(config)
    placement = Placement.from_env(config.device, config.precision)
    gold = gold_reader_of(store, gold_ref, system.reader)
    reader_dir = f"{gold.path}/reader" if gold is not None else system.reader
    inputs = {"blocks": blocks_ref.content_hash, "questions": questions_ref.content_hash,
              **system.hashes(), "gold_reader": gold.ref.content_hash if gold is not None else "none",
              "code": code_version((__name__,), ("torch", "transformers", "bm25s"))}
    cache = CachedStage(store, MODEL_KIND, config, inputs, force)
    if cache.hit:
        return cache.hit
    tokenizer = load_tokenizer(system.reader)
    blocks = _blocks(store, blocks_ref, tokenizer)
    questions = load_questions(store, questions_ref, config.dataset, config.split)
    dev = load_questions(store, questions_ref, config.dataset, config.dev_split, config.dev_questions) \
        if config.eval_every else None
    query_encoder = None
    if kind.needs_query_encoder:
        assert system.query_encoder is not None
        query_encoder = RetrieverEncoder.from_pretrained(system.query_encoder, dropout=config.dropout)
    retriever = _retriever(store, blocks_ref, system, blocks, query_encoder, tokenizer, config)
    reader = SpanReader.from_pretrained(reader_dir, config.max_span_length, config.dropout, config.seed)
    models = QAModels(reader, query_encoder)
    checkpoints = cache.checkpoints
    curves = train_reader(models, retriever, questions, blocks, tokenizer, config, config.budget(),
                          checkpoints, dev, progress, placement, query_learning_rate=config.query_rate())
    if not placement.is_main:
        return rank_zero_artifact(placement, cache)
    trained = [r for r in curves.steps if r["loss"] == r["loss"]]  # NaN: nothing to learn that step
    tail = trained[-min(20, len(trained)):]
    stats = {"system": system.name, "dataset": f"{config.dataset}/{config.split}", "train_questions": len(questions),
             "steps": config.steps, "steps_trained": len(trained),
             "with_gold": round(float(np.mean([r["with_gold"] for r in curves.steps])), 3) if curves.steps else None,
             "final_loss": round(float(np.mean([r["loss"] for r in tail])), 4) if tail else None,
             "gold_passage": gold.manifest.get("stats") if gold is not None else None,
             "open": _budget_stats(curves, len(questions)),
             "world_size": placement.world_size, "device": str(placement.device), "precision": placement.precision}
    report = f"### fine-tuning {system.name} on {config.dataset}/{config.split}\n\n"
    if gold is not None:
        report += gold.manifest.get("report", "") + "\n\n"
    report += "open-domain phase:\n\n" + _curve(curves.steps)
    plot = Plot("finetune_curve.png", curves.steps, "step", ["loss", "with_gold"],
                f"open-QA fine-tuning: {system.name}") if curves.steps else None
    return publish_trained(cache, reader=reader, tokenizer=tokenizer,
                           encoders={"query_encoder": query_encoder} if query_encoder is not None else None,
                           tokenizer_source=system.reader,
                           tables={"finetune_curve": [{**r, "phase": "open"} for r in curves.steps]}, plot=plot,
                           manifest={"stats": stats, "report": report, "system": system.spec()},
                           barrier=placement.barrier)
