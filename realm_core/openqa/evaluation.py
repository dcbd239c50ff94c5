"""The open-QA evaluation stage (REALM Table 1): every system answers every dataset's test
questions after its form and retrieval temperature are fit on dev questions; exact match and F1
on the full split and the answerable subset, recall@k of the blocks and of the text read, the
gold-paragraph reader's ceiling, and a paired EM difference with a 95% bootstrap interval and
McNemar's p for every pair of trained systems (`openqa_eval` artifact).

Shapes: M reader rows, T tokens, L span lengths.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from realm_core.answers import f1_score
from realm_core.config import FinetuneConfig, OpenQAEvalConfig
from realm_core.distributed import module_device
from realm_core.errors import InputError
from realm_core.openqa.finetune_stage import (
    EVAL_KIND,
    GOLD_SYSTEM,
    MODEL_KIND,
    NOTE_SMALL_CORPUS,
    QASystem,
    _blocks,
    _retriever,
    gold_reader_of,
    load_questions,
)
from realm_core.openqa.predict import (
    Prediction,
    QAModels,
    answer_correct,
    fit_temperature,
    predict,
)
from realm_core.openqa.reading import BlockStore, QAQuestion
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap
from realm_core.openqa.span_reader import SpanReader
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.retrievers import RETRIEVERS, Retriever
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version


@dataclass
class ReadMemo:
    """Span scores of every reader row read in one evaluation, keyed by the reader's weights (the
    content hash of its directory) and the row's own wordpieces, so that each distinct row is
    read once. With no open-domain phase (the demo and `make openqa-table`), BM25, ICT and
    REALM's retriever + baseline reader answer with one reader, and REALM and ICT's retriever +
    REALM's reader with another, and their top-k blocks overlap, on the calibration questions
    as on the test ones. Scores are kept unpadded, (row length, L), -inf where a span leaves
    the body."""

    scores: dict[tuple[str, bytes], torch.Tensor] = field(default_factory=dict)
    read: int = 0    # rows a reader ran on
    reused: int = 0  # rows answered from the memo

    def forget(self, key: str) -> None:
        """Drop the rows of the reader whose weights hash to `key` (no later system reads with it)."""
        self.scores = {k: v for k, v in self.scores.items() if k[0] != key}


class ReadOnce(torch.nn.Module):
    """A span reader (same call as `SpanReader`) that runs only on the rows `memo` lacks."""

    def __init__(self, reader: SpanReader, memo: ReadMemo, key: str) -> None:
        super().__init__()
        self.reader, self.memo, self.key = reader, memo, key  # key: the reader's weights, hashed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, block_token_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        """(B, K, T) rows -> span scores (B, K, T, L), as the reader's own."""
        b, k, t = input_ids.shape
        flat = [x.reshape(b * k, t).cpu() for x in (input_ids, attention_mask, block_token_mask, token_type_ids)]
        lengths = flat[1].sum(-1).tolist()
        keys = [(self.key, hashlib.sha1(b"".join(x[i, :n].numpy().tobytes() for x in (flat[0], flat[2], flat[3])),
                                        usedforsecurity=False).digest())
                for i, n in enumerate(lengths)]
        todo = [i for i, key in enumerate(keys) if key not in self.memo.scores]
        if todo:  # the new rows, read as one question's K
            device = module_device(self.reader)
            new = self.reader(*(x[todo][None].to(device) for x in flat)).float()[0].cpu()  # (M, T, L)
            for m, i in enumerate(todo):
                self.memo.scores[keys[i]] = new[m, :lengths[i]].clone()
        self.memo.read += len(todo)
        self.memo.reused += len(keys) - len(todo)
        out = torch.full((b * k, t, self.reader.scorer.max_span_length), float("-inf"))
        for i, key in enumerate(keys):
            row = self.memo.scores[key]
            out[i, :row.shape[0]] = row
        return out.view(b, k, t, -1)


def answerable(questions: list[QAQuestion], blocks: BlockStore) -> list[bool]:
    """Does a gold answer occur in some corpus block (DPR's has_answer; regex search)?"""
    from realm_core.answers import token_string

    corpus = range(blocks.corpus_size)
    joined = "\n".join(blocks.tokens(z) for z in corpus)  # one token string per line
    out = []
    for q in questions:
        if q.match == "regex":
            out.append(any(blocks.holds_answer(q, z) for z in corpus))
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


def _scored(preds: list[Prediction], qs: list[QAQuestion], blocks: BlockStore) -> dict[str, list[Any]]:
    """Per question: correct, F1, answer rank among the retrieved blocks, answer in the text read."""
    correct = [answer_correct(p.answer, q) for p, q in zip(preds, qs, strict=True)]
    f1 = [float(c) if q.match == "regex" else f1_score(p.answer, q.answers)
          for p, q, c in zip(preds, qs, correct, strict=True)]
    ranks: list[int | None] = []
    read: list[bool] = []
    for p, q in zip(preds, qs, strict=True):
        holds = [blocks.holds_answer(q, z) for z in p.block_ids]
        ranks.append(holds.index(True) + 1 if any(holds) else None)
        read.append(any(h and blocks.holds_answer(q, z, n) for h, z, n in zip(holds, p.block_ids, p.body_tokens, strict=True)))
    return {"correct": correct, "f1": f1, "rank": ranks, "read": read}


def _mean(values: list[Any]) -> float:
    return float(np.mean(values)) if values else 0.0


def run_evaluate_openqa(store: ArtifactStore, blocks_ref: ArtifactRef, questions_ref: ArtifactRef,
                        entries: list[tuple[QASystem, ArtifactRef | None]], finetune_config: FinetuneConfig,
                        config: OpenQAEvalConfig, progress: Progress | None = None,
                        gold_ref: ArtifactRef | None = None) -> StageResult:
    """Each system answers every dataset's questions; `entries` pairs a system with its
    fine-tuned `openqa_model` (None: evaluated as it is, e.g. no retrieval). Each retrieving
    system's retrieval temperature is fit on `calibration_questions` dev questions first. The
    gold-paragraph reader (the baseline reader after its gold-passage phase) reads each SQuAD
    question's own paragraph: the reader's ceiling apart from retrieval."""
    from realm_core.bert import load_tokenizer
    from realm_core.distributed import Placement, resolve_device
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.retrievers import GoldPassage
    from realm_core.retrieval.stage import encoder_hash

    progress = progress or NoProgress()
    baseline = entries[0][0].reader
    gold = gold_reader_of(store, gold_ref, baseline)  # the `gold_reader` stage: the baseline's
    inputs = {"blocks": blocks_ref.content_hash, "questions": questions_ref.content_hash,
              "finetune": finetune_config.config_hash(), "code": code_version((__name__,), ("bm25s",)),
              "gold_reader": gold.ref.content_hash if gold is not None else "none"}
    for i, (system, model) in enumerate(entries):
        inputs[f"system{i}"] = str(system.hashes()) + (f"@{model.content_hash}" if model else "")
    cache = CachedStage(store, EVAL_KIND, config, inputs)
    if cache.hit:
        return cache.hit
    started = time.perf_counter()
    tokenizer = load_tokenizer(baseline)
    blocks = _blocks(store, blocks_ref, tokenizer)
    datasets = {d: load_questions(store, questions_ref, d, config.split, config.question_limits.get(d), blocks)
                for d in config.datasets}
    qa_path = store.open(questions_ref, kind="questions").path
    for qs in datasets.values():
        _check_regexes(qs, qa_path)
    calibration = load_questions(store, questions_ref, finetune_config.dataset, finetune_config.dev_split,
                                 config.calibration_questions, blocks)
    in_corpus = {d: answerable(qs, blocks) for d, qs in datasets.items()}
    results: dict[str, Any] = {d: {"questions": len(qs), "answerable": int(sum(in_corpus[d])), "systems": {}}
                               for d, qs in datasets.items()}
    per_question: dict[str, dict[str, list[bool]]] = {d: {} for d in datasets}
    rows: list[dict[str, Any]] = []
    k = finetune_config.top_k
    runs: list[tuple[str, Retriever, QAModels, bool]] = []  # name, retriever, models, fit τ
    memo = ReadMemo()  # each distinct (reader, row) read once across systems and settings
    # the readers' device and precision (as trained, or int8 where asked); one process reads, so
    # no process group
    place = Placement(resolve_device(finetune_config.device),
                      "int8" if config.precision == "int8" else finetune_config.precision)

    def read_once(reader_dir: str) -> SpanReader:
        # one seed for every reader: a directory without a span head gets the same fresh one, so
        # equal directory hashes mean equal weights
        reader = SpanReader.from_pretrained(reader_dir, finetune_config.max_span_length, seed=finetune_config.seed)
        return cast(SpanReader, ReadOnce(place.for_inference(reader.to(place.device)), memo, encoder_hash(reader_dir)))

    if gold is not None:
        runs.append((GOLD_SYSTEM, GoldPassage(blocks, 1), QAModels(read_once(f"{gold.path}/reader"), None), False))
    for system, model in entries:
        reader_dir = f"{model.path}/reader" if model else system.reader
        kind = RETRIEVERS[system.retrieval]
        query_dir = f"{model.path}/query_encoder" if model and kind.needs_query_encoder else system.query_encoder
        reader = read_once(reader_dir)
        query_encoder = None
        if kind.needs_query_encoder:
            assert query_dir is not None
            query_encoder = place.for_inference(RetrieverEncoder.from_pretrained(query_dir))
        retriever = _retriever(store, blocks_ref, system, blocks, query_encoder, tokenizer, finetune_config)
        runs.append((system.name, retriever, QAModels(reader, query_encoder), kind.retrieves))
    temperatures: dict[str, Any] = {}
    for i, (name, retriever, models, fit) in enumerate(runs):
        temperature: float | None = finetune_config.train_temperature(retriever.name)
        form = finetune_config.form
        if fit:  # form and retrieval temperature, fit on dev questions (uniform p(z|x) is a candidate)
            tried = predict(models, retriever, calibration, blocks, tokenizer, finetune_config, config.answer_candidates,
                            config.batch_size, progress, (None, *config.temperatures), config.forms, place,
                            config.reader_tokens)
            (form, temperature), dev_em = fit_temperature(tried, calibration)
            temperatures[name] = {"form": form, "temperature": temperature, "dev_em": dev_em}
        run_config = finetune_config.model_copy(update={"form": form})
        for d, qs in datasets.items():
            if retriever.needs_passage and any(q.passage is None for q in qs):
                continue  # the gold-paragraph reader needs every question's own passage (SQuAD)
            preds = predict(models, retriever, qs, blocks, tokenizer, run_config, config.answer_candidates,
                            config.batch_size, progress, (temperature,), placement=place,
                            row_tokens=config.reader_tokens)[temperature]
            sc = _scored(preds, qs, blocks)
            subset = [i for i, a in enumerate(in_corpus[d]) if a]
            results[d]["systems"][name] = {
                "EM": _mean(sc["correct"]), "EM answerable": _mean([sc["correct"][i] for i in subset]),
                "F1": _mean(sc["f1"]), f"R@{k}": _mean([r is not None for r in sc["rank"]]),
                f"R@{k} read": _mean(sc["read"]), "form": form,
                "temperature": "uniform" if temperature is None else temperature}
            per_question[d][name] = sc["correct"]
            rows += [{"dataset": d, "split": config.split, "system": name, "qid": q.qid, "question": q.question,
                      "answers": list(q.answers), "predicted": p.answer, "score": p.score, "correct": c,
                      "answer_retrieved": r is not None, "answerable": a, "block_ids": p.block_ids,
                      "answer_rank": r, "answer_read": rd, "f1": f}
                     for q, p, c, r, a, rd, f in zip(qs, preds, sc["correct"], sc["rank"], in_corpus[d], sc["read"],
                                                     sc["f1"], strict=True)]
        key = cast(ReadOnce, models.reader).key
        if all(cast(ReadOnce, later.reader).key != key for _, _, later, _ in runs[i + 1:]):
            memo.forget(key)  # its rows are read by no later system: free them
    trained = {GOLD_SYSTEM} | {s.name for s, m in entries if m is not None}
    for d in datasets:
        names = [n for n in per_question[d] if n in trained]
        results[d]["paired"] = {}
        for a, b in itertools.combinations(names, 2):
            delta, lo, hi = paired_bootstrap(per_question[d][a], per_question[d][b], config.bootstrap_resamples)
            results[d]["paired"][f"{a} - {b}"] = {"delta": delta, "ci95": [lo, hi],
                                                  "mcnemar_p": mcnemar_p(per_question[d][a], per_question[d][b])}
    budget = {s.name: store.open(m, kind=MODEL_KIND).manifest["stats"] for s, m in entries if m is not None}
    specs = [{"name": s.name, "note": s.note, "fine_tuned": m is not None, "reader_start": s.reader}
             for s, m in entries]
    if gold is not None:
        specs.insert(0, {"name": GOLD_SYSTEM, "note": "each question's own SQuAD paragraph as the only block",
                         "fine_tuned": True, "reader_start": baseline})
    report = results_markdown(results, specs, finetune_config)
    stats = {f"{d} EM {s}": round(m["EM"], 4) for d, r in results.items() for s, m in r["systems"].items()}
    stats |= {"reader rows read": memo.read, "reader rows reused": memo.reused}
    stats |= {"device": str(place.device), "precision": place.precision}  # the readers' forwards
    stats["wall seconds"] = round(time.perf_counter() - started, 1)  # this evaluation, its fine-tuning apart
    with cache.write() as out:
        out.table("openqa_predictions").write(rows)
        out.extra_manifest.update({"results": results, "systems": specs, "stats": stats, "report": report,
                                   "temperatures": temperatures, "budget": budget,
                                   "gold_reader": gold.manifest.get("stats") if gold is not None else None,
                                   "finetune": finetune_config.model_dump(mode="json")})
    return cache.result()


def _interval(p: dict[str, Any]) -> str:
    lo, hi = p["ci95"]
    return f"{100 * p['delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}], McNemar p={p['mcnemar_p']:.3g}"


def results_markdown(results: dict[str, Any], systems: list[dict[str, Any]], config: FinetuneConfig) -> str:
    """REALM Table 1 layout: a row per system, a column per dataset; each cell is exact match on
    the full split / on the answerable subset / F1, then recall@k of the retrieved blocks and of
    the text read. Then every paired difference in EM with its 95% interval."""
    names = list(results)
    k = config.top_k
    lines = ["| system | " + " | ".join(f"{d} EM / answerable EM / F1 / R@{k} / R@{k} read" for d in names) + " |",
             "|---|" + "---:|" * len(names)]
    for s in systems:
        cells = []
        for d in names:
            m = results[d]["systems"].get(s["name"])
            cells.append("-" if m is None else f"{100 * m['EM']:.1f} / {100 * m['EM answerable']:.1f} / "
                         f"{100 * m['F1']:.1f} / {100 * m[f'R@{k}']:.1f} / {100 * m[f'R@{k} read']:.1f}")
        lines.append(f"| {s['name']}{' (' + s['note'] + ')' if s['note'] else ''} | " + " | ".join(cells) + " |")
    sizes = "; ".join(f"{d}: {r['questions']:,} questions, {r['answerable']:,} answerable" for d, r in results.items())
    out = "\n".join(lines) + (f"\n\nQuestions ({sizes}). Fine-tuned on {config.dataset}/{config.split}: "
                              f"gold passages {config.gold_passage.steps} steps x {config.gold_passage.batch_size}, "
                              f"then {config.steps} steps x {config.batch_size} on each system's top-{k} blocks, "
                              f"{config.form} marginal. " + NOTE_SMALL_CORPUS)
    for d in names:
        paired = results[d].get("paired", {})
        if paired:
            out += f"\n\nPaired EM differences on {d} (95% bootstrap interval over questions):\n\n" + "\n".join(
                f"- {pair}: {_interval(p)}" for pair, p in paired.items())
    return out
