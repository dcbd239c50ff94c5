"""The open-QA stages (REALM Table 1): fine-tune a system's reader and query encoder on one
dataset (`openqa_model` artifact), then evaluate systems side by side (`openqa_eval` artifact:
exact match on the full split and on its answerable subset, recall@k, every prediction).

A system is a retriever + a reader start:

| system          | retrieval                      | reader starts from              |
|-----------------|--------------------------------|---------------------------------|
| no retrieval    | none (null block only)         | the baseline reader             |
| BM25 + reader   | bm25s, uniform p(z|x)          | the baseline reader             |
| ICT (ORQA-like) | ICT encoders, index frozen     | the baseline reader             |
| REALM           | REALM's encoders, index frozen | REALM's knowledge-augm. encoder |

The baseline reader plays BERT's part in the paper, where ORQA's reader starts from BERT and
REALM's from BERT + REALM pretraining: it is the reader masked-LM warm-up that REALM pretraining
itself starts from (`pretrain.reader_mlm`), or the bundled encoder where the preset has none.
So a REALM gain over ICT is REALM pretraining's, not the warm-up's.

Every trained system gets the same fine-tuning config (steps, batch, learning rate).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from realm_core.artifacts import ArtifactRef, ArtifactStore, StageResult, artifact_key, code_version
from realm_core.config import (
    BUNDLED_ENCODER,
    EmbedConfig,
    FinetuneConfig,
    OpenQAEvalConfig,
    PretrainConfig,
)
from realm_core.curves import curve_markdown, plot_curves
from realm_core.errors import ConfigError, InputError
from realm_core.openqa.answers import exact_match
from realm_core.openqa.finetune import (
    BlockStore,
    QAModels,
    QAQuestion,
    QARetriever,
    finetune,
    predict,
)
from realm_core.progress import NoProgress, Progress

MODEL_KIND = "openqa_model"
EVAL_KIND = "openqa_eval"
QA_CODE = ("realm_core.openqa.qa_stage", "realm_core.openqa.finetune", "realm_core.openqa.span_reader",
           "realm_core.openqa.answers", "realm_core.retrieval.encoders", "realm_core.training")
CURVE_COLUMNS = ("step", "loss", "with_gold", "learning_rate")
NOTE_SMALL_CORPUS = ("NQ, WebQuestions and CuratedTREC were written against all of Wikipedia; "
                     "over a small corpus most answers are absent, so compare systems on the "
                     "answerable subset and expect paper-level numbers only from the full dump "
                     "(paper preset).")


@dataclass(frozen=True)
class QASystem:
    key: str                             # none | bm25 | ict | realm (CLI and flow parameter)
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
        from realm_core.retrieval.stage import encoder_hash

        out = {"system": str(self.spec()), "reader": encoder_hash(self.reader)}
        if self.query_encoder is not None and self.doc_embed is not None:
            out |= {"query_encoder": encoder_hash(self.query_encoder),
                    "doc_encoder": encoder_hash(self.doc_embed.doc_encoder)}
        return out


SYSTEM_KEYS = ("none", "bm25", "ict", "realm")


def check_system_keys(keys: list[str]) -> list[str]:
    bad = [k for k in keys if k not in SYSTEM_KEYS]
    if bad:
        raise ConfigError(f"system {bad[0]!r}: expected one of {', '.join(SYSTEM_KEYS)}")
    return keys


def qa_systems(ict_ref: ArtifactRef | None, realm_ref: ArtifactRef | None, embed: EmbedConfig,
               encoder: str = BUNDLED_ENCODER) -> list[QASystem]:
    """The Table 1 rows that the given artifacts allow, in order of expected strength; `encoder`
    is the baseline reader (see the module docstring)."""
    systems = [QASystem("none", "no retrieval", "none", encoder,
                        note="extractive reader, no block: nothing to extract"),
               QASystem("bm25", "BM25 + reader", "bm25", encoder)]
    if ict_ref is not None:
        systems.append(QASystem("ict", "ICT (ORQA-like)", "dense", encoder, f"{ict_ref.path}/query_encoder",
                                embed.model_copy(update={"doc_encoder": f"{ict_ref.path}/doc_encoder"})))
    if realm_ref is not None:
        systems.append(QASystem("realm", "REALM", "dense", f"{realm_ref.path}/reader", f"{realm_ref.path}/query_encoder",
                                embed.model_copy(update={"doc_encoder": f"{realm_ref.path}/doc_encoder"})))
    return systems


def baseline_reader(warm_reader: ArtifactRef | None, pretrain: PretrainConfig) -> str:
    """The BERT directory the baselines' span readers start from: the reader masked-LM warm-up's
    (`warm_reader`, the run_warm_reader artifact) or, without one, REALM's reader encoder."""
    from realm_core.pretrain.reader_mlm import reader_mlm_dir

    return reader_mlm_dir(warm_reader) if warm_reader is not None else pretrain.reader_encoder


def load_questions(store: ArtifactStore, questions_ref: ArtifactRef, dataset: str, split: str,
                   limit: int | None = None) -> list[QAQuestion]:
    art = store.open(questions_ref, kind="questions")
    table = art.read_table("questions").to_pylist()
    rows = [r for r in table if r["dataset"] == dataset and r["split"] == split]
    if not rows:
        have = sorted({f"{r['dataset']}/{r['split']}" for r in table})
        raise ConfigError(f"{art.path}: no {dataset}/{split} questions; the questions stage holds "
                          f"{', '.join(have)} (add a source to `questions.sources`)")
    return [QAQuestion(r["qid"], r["question"], tuple(r["answers"]), r["match"]) for r in rows[:limit]]


def _blocks(store: ArtifactStore, blocks_ref: ArtifactRef, tokenizer: Any) -> BlockStore:
    table = store.open(blocks_ref, kind="blocks").read_table("blocks", ["title", "text"])
    return BlockStore(table.column("title").to_pylist(), table.column("text").to_pylist(), tokenizer)


def _retriever(store: ArtifactStore, blocks_ref: ArtifactRef, system: QASystem, blocks: BlockStore,
               query_encoder: Any, tokenizer: Any, config: FinetuneConfig) -> QARetriever:
    if system.retrieval != "dense":
        return QARetriever(system.retrieval, blocks, config.top_k, config.question_length)
    from realm_core.retrieval.embed import load_embeddings
    from realm_core.retrieval.stage import run_embed_blocks

    assert system.doc_embed is not None
    emb = store.open(run_embed_blocks(store, blocks_ref, system.doc_embed).ref, kind="embeddings")
    vectors = load_embeddings(Path(emb.path) / "embeddings", emb.manifest["embeddings"], len(blocks))
    if vectors.shape[1] != query_encoder.projection_dim:
        raise ConfigError(f"{emb.path}: block embeddings of dimension {vectors.shape[1]}, query "
                          f"encoder {system.query_encoder} gives {query_encoder.projection_dim}")
    return QARetriever("dense", blocks, config.top_k, config.question_length, query_encoder, tokenizer, vectors)


def run_finetune(store: ArtifactStore, blocks_ref: ArtifactRef, questions_ref: ArtifactRef,
                 system: QASystem, config: FinetuneConfig, progress: Progress | None = None,
                 force: bool = False) -> StageResult:
    from realm_core.distributed import Placement, rank_zero_artifact
    from realm_core.encoders import load_tokenizer
    from realm_core.openqa.span_reader import SpanReader
    from realm_core.retrieval.encoders import RetrieverEncoder

    if system.retrieval == "none":
        raise ConfigError(f"{system.name}: a system that retrieves nothing has no span to learn from; "
                          "it is evaluated as it is")
    inputs = {"blocks": blocks_ref.content_hash, "questions": questions_ref.content_hash,
              **system.hashes(), "code": code_version(QA_CODE, ("torch", "transformers", "bm25s"))}
    key = artifact_key(config.config_hash(), inputs)
    if not force and (hit := store.lookup(MODEL_KIND, key)) is not None:
        return StageResult(hit.ref, True, hit.manifest["stats"], hit.manifest["report"])
    placement = Placement.from_env(config.device, config.precision)
    questions = load_questions(store, questions_ref, config.dataset, config.split)
    tokenizer = load_tokenizer(system.reader)
    blocks = _blocks(store, blocks_ref, tokenizer)
    query_encoder = None
    if system.retrieval == "dense":
        assert system.query_encoder is not None
        query_encoder = RetrieverEncoder.from_pretrained(system.query_encoder, dropout=config.dropout)
    retriever = _retriever(store, blocks_ref, system, blocks, query_encoder, tokenizer, config)
    reader = SpanReader.from_pretrained(system.reader, config.max_span_length, config.dropout, config.seed)
    models = QAModels(reader, query_encoder)
    checkpoints = Path(store.root) / "checkpoints" / f"finetune-{key}"
    curves = finetune(models, retriever, questions, blocks, tokenizer, config, checkpoints, progress, placement)
    if not placement.is_main:
        return rank_zero_artifact(placement, store, MODEL_KIND, key)
    trained = [r for r in curves.steps if r["loss"] == r["loss"]]  # NaN: nothing to learn that step
    tail = trained[-min(20, len(trained)):]
    stats = {"system": system.name, "dataset": f"{config.dataset}/{config.split}",
             "train_questions": len(questions), "steps": config.steps, "steps_trained": len(trained),
             "questions_seen": int(sum(r["questions"] for r in curves.steps)),
             "with_gold": round(float(np.mean([r["with_gold"] for r in curves.steps])), 3),
             "final_loss": round(float(np.mean([r["loss"] for r in tail])), 4) if tail else None,
             "world_size": placement.world_size, "device": str(placement.device), "precision": config.precision}
    report = f"### fine-tuning {system.name} on {config.dataset}/{config.split}\n\n" + curve_markdown(
        curves.steps, CURVE_COLUMNS)
    with store.write(MODEL_KIND, key, config=config.model_dump(mode="json"), config_hash=config.config_hash(),
                     inputs=inputs, replace=force) as out:
        reader.save_pretrained(out.tmp / "reader")
        tokenizer.save_pretrained(str(out.tmp / "reader"))
        if query_encoder is not None:
            query_encoder.eval()
            query_encoder.save_pretrained(out.tmp / "query_encoder", tokenizer_source=system.reader)
        out.table("finetune_curve").write(curves.steps)
        plot_curves(curves.steps, "step", ["loss", "with_gold"], out.file("finetune_curve.png"),
                    f"open-QA fine-tuning: {system.name}")
        out.extra_manifest.update({"stats": stats, "report": report, "system": system.spec()})
    shutil.rmtree(checkpoints, ignore_errors=True)
    placement.barrier()
    hit = store.lookup(MODEL_KIND, key)
    assert hit is not None
    return StageResult(hit.ref, False, stats, report)


def answer_correct(prediction: str, q: QAQuestion) -> bool:
    """SQuAD exact match after normalisation; CuratedTREC: a regex matches the prediction from
    its start, case-insensitively (DrQA's and REALM's regex_match_score)."""
    if q.match == "regex":
        return any(re.match(p, prediction, flags=re.IGNORECASE) is not None for p in q.answers)
    return exact_match(prediction, q.answers)


def answerable(questions: list[QAQuestion], blocks: BlockStore) -> list[bool]:
    """Does a gold answer occur in some block of the corpus (DPR's has_answer; regex search)?"""
    from realm_core.openqa.answers import token_string

    joined = "\n".join(blocks.tokens(z) for z in range(len(blocks)))  # one token string per line
    out = []
    for q in questions:
        if q.match == "regex":
            out.append(any(blocks.holds_answer(q, z) for z in range(len(blocks))))
        else:
            out.append(any(n.strip() and n in joined for n in map(token_string, q.answers)))
    return out


def _check_regexes(questions: list[QAQuestion], source: str) -> None:
    for q in questions:
        if q.match == "regex":
            for p in q.answers:
                try:
                    re.compile(p)
                except re.error as e:
                    raise InputError(source, "valid answer regexes", found=f"{p!r} ({e})",
                                     position=q.qid) from None


def run_evaluate_openqa(store: ArtifactStore, blocks_ref: ArtifactRef, questions_ref: ArtifactRef,
                        entries: list[tuple[QASystem, ArtifactRef | None]], finetune_config: FinetuneConfig,
                        config: OpenQAEvalConfig, progress: Progress | None = None) -> StageResult:
    """Each system answers every dataset's questions; `entries` pairs a system with its
    fine-tuned `openqa_model` (None: evaluated as it is, e.g. no retrieval)."""
    from realm_core.encoders import load_tokenizer
    from realm_core.openqa.span_reader import SpanReader
    from realm_core.retrieval.encoders import RetrieverEncoder

    progress = progress or NoProgress()
    inputs = {"blocks": blocks_ref.content_hash, "questions": questions_ref.content_hash,
              "finetune": finetune_config.config_hash(), "code": code_version(QA_CODE, ("bm25s",))}
    for i, (system, model) in enumerate(entries):
        inputs[f"system{i}"] = str(system.spec()) + (f"@{model.content_hash}" if model else "")
    key = artifact_key(config.config_hash(), inputs)
    if (hit := store.lookup(EVAL_KIND, key)) is not None:
        return StageResult(hit.ref, True, hit.manifest["stats"], hit.manifest["report"])
    tokenizer = load_tokenizer(entries[0][0].reader)
    blocks = _blocks(store, blocks_ref, tokenizer)
    datasets = {d: load_questions(store, questions_ref, d, config.split, config.question_limits.get(d))
                for d in config.datasets}
    qa_path = store.open(questions_ref, kind="questions").path
    for qs in datasets.values():
        _check_regexes(qs, qa_path)
    in_corpus = {d: answerable(qs, blocks) for d, qs in datasets.items()}
    results: dict[str, Any] = {d: {"questions": len(qs), "answerable": int(sum(in_corpus[d])), "systems": {}}
                               for d, qs in datasets.items()}
    rows: list[dict[str, Any]] = []
    for system, model in entries:
        reader_dir = f"{model.path}/reader" if model else system.reader
        query_dir = f"{model.path}/query_encoder" if model and system.retrieval == "dense" else system.query_encoder
        reader = SpanReader.from_pretrained(reader_dir, finetune_config.max_span_length, seed=finetune_config.seed)
        query_encoder = None
        if system.retrieval == "dense":
            assert query_dir is not None
            query_encoder = RetrieverEncoder.from_pretrained(query_dir).eval()
        retriever = _retriever(store, blocks_ref, system, blocks, query_encoder, tokenizer, finetune_config)
        for d, qs in datasets.items():
            preds = predict(QAModels(reader, query_encoder), retriever, qs, blocks, tokenizer, finetune_config,
                            config.answer_candidates, config.batch_size, progress)
            correct = [answer_correct(p.answer, q) for p, q in zip(preds, qs, strict=True)]
            retrieved = [any(blocks.holds_answer(q, z) for z in p.block_ids) for p, q in zip(preds, qs, strict=True)]
            subset = [c for c, a in zip(correct, in_corpus[d], strict=True) if a]
            results[d]["systems"][system.name] = {
                "EM": float(np.mean(correct)) if correct else 0.0,
                "EM answerable": float(np.mean(subset)) if subset else 0.0,
                f"R@{finetune_config.top_k}": float(np.mean(retrieved)) if retrieved else 0.0}
            rows += [{"dataset": d, "split": config.split, "system": system.name, "qid": q.qid,
                      "question": q.question, "answers": list(q.answers), "predicted": p.answer,
                      "score": p.score, "correct": c, "answer_retrieved": r, "answerable": a,
                      "block_ids": p.block_ids}
                     for q, p, c, r, a in zip(qs, preds, correct, retrieved, in_corpus[d], strict=True)]
    specs = [{"name": s.name, "note": s.note, "fine_tuned": m is not None, "reader_start": s.reader}
             for s, m in entries]
    report = results_markdown(results, specs, finetune_config)
    stats = {f"{d} EM {s}": round(m["EM"], 4) for d, r in results.items() for s, m in r["systems"].items()}
    with store.write(EVAL_KIND, key, config=config.model_dump(mode="json"), config_hash=config.config_hash(),
                     inputs=inputs) as out:
        out.table("openqa_predictions").write(rows)
        out.extra_manifest.update({"results": results, "systems": specs, "stats": stats, "report": report,
                                   "finetune": finetune_config.model_dump(mode="json")})
    hit = store.lookup(EVAL_KIND, key)
    assert hit is not None
    return StageResult(hit.ref, False, stats, report)


def results_markdown(results: dict[str, Any], systems: list[dict[str, Any]], config: FinetuneConfig) -> str:
    """REALM Table 1 layout: a row per system, a column per dataset; each cell is exact match on
    the full split / on the answerable subset, then recall@k of the retrieved blocks."""
    names = list(results)
    k = config.top_k
    lines = ["| system | " + " | ".join(f"{d} EM / answerable EM / R@{k}" for d in names) + " |",
             "|---|" + "---:|" * len(names)]
    for s in systems:
        cells = []
        for d in names:
            m = results[d]["systems"][s["name"]]
            cells.append(f"{100 * m['EM']:.1f} / {100 * m['EM answerable']:.1f} / {100 * m[f'R@{k}']:.1f}")
        lines.append(f"| {s['name']}{' (' + s['note'] + ')' if s['note'] else ''} | " + " | ".join(cells) + " |")
    sizes = "; ".join(f"{d}: {r['questions']:,} questions, {r['answerable']:,} answerable" for d, r in results.items())
    return "\n".join(lines) + (f"\n\nQuestions ({sizes}). Fine-tuned on {config.dataset}/{config.split}, "
                               f"{config.steps} steps x {config.batch_size} questions, top-{k} blocks. "
                               + NOTE_SMALL_CORPUS)
