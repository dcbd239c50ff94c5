"""Answering questions with a trained open-QA system: the span reader over a retriever's
top-k blocks, p(y|x) summed over the (block, span) pairs that read as one answer (REALM §3.4;
ORQA). The query side (`realm ask`, the service), evaluation and fine-tuning's dev selection all
answer through `predict`.

Shapes: B questions, K blocks, T tokens, L max span length, S = T * L spans of a block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from realm_core.answers import exact_match, normalize_answer
from realm_core.config import SpanReaderConfig
from realm_core.distributed import Placement
from realm_core.openqa.reading import BlockStore, QAQuestion, reader_rows
from realm_core.openqa.span_reader import SpanReader, read_by_length, span_log_probs
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.retrievers import Retriever


@dataclass
class QAModels:
    reader: SpanReader
    query_encoder: Any  # RetrieverEncoder or None (BM25, gold, null)

    def modules(self) -> dict[str, torch.nn.Module]:
        out: dict[str, torch.nn.Module] = {"reader": self.reader}
        if self.query_encoder is not None:
            out["query_encoder"] = self.query_encoder
        return out



def answer_correct(prediction: str, q: QAQuestion) -> bool:
    """SQuAD exact match after normalisation; CuratedTREC: a regex matches the prediction from
    its start, case-insensitively (DrQA's and REALM's regex_match_score)."""
    import re

    if q.match == "regex":
        return any(re.match(p, prediction, flags=re.IGNORECASE) is not None for p in q.answers)
    return exact_match(prediction, q.answers)



def retrieval_log_p(retriever: Retriever, questions: list[QAQuestion], proposal: Any,
                    temperature: float | None) -> torch.Tensor:
    """(B, K) log p(z|x) = log softmax(logits / temperature); None: uniform over the K blocks."""
    logits = retriever.logits(questions, proposal).float()  # (B, K)
    if temperature is None or not math.isfinite(temperature):
        return torch.log_softmax(torch.zeros_like(logits), dim=-1)
    return torch.log_softmax(logits / temperature, dim=-1)



@dataclass
class Prediction:
    answer: str
    score: float               # p(answer|x), summed over the spans that read as this answer
    block_ids: list[int]
    body_tokens: list[int]     # body wordpieces the reader read of each block
    block: int | None = None   # the block the answer was read from
    char_start: int = -1       # the answer's character offsets in that block's text
    char_end: int = -1
    candidates: list[tuple[str, float]] = field(default_factory=list)  # other answers, best first


def predict(models: QAModels, retriever: Retriever, questions: list[QAQuestion], blocks: BlockStore,
            tokenizer: Any, config: SpanReaderConfig, answer_candidates: int = 20, batch_size: int = 16,
            progress: Progress | None = None, temperatures: tuple[float | None, ...] = (None,),
            forms: tuple[str, ...] | None = None, placement: Placement | None = None,
            row_tokens: int = 12_288) -> dict[Any, list[Prediction]]:
    """The most probable answer string per question, for each retrieval temperature (the reader
    runs once): p(y|x) summed over the `answer_candidates` best (block, span) pairs that
    normalise to the same string. In `config.form`, keyed by temperature; with `forms`, every
    (form, temperature) pair, keyed so. The reader runs on `placement`'s device and precision
    (default: the CPU, fp32), on the `batch_size` questions' rows in length order, at most
    `row_tokens` padded wordpieces a forward (`read_by_length`)."""
    progress = progress or NoProgress()
    place = placement or Placement.single()
    grid = [(f, t) for f in (forms or (config.form,)) for t in temperatures]
    out: dict[Any, list[Prediction]] = {(g if forms else g[1]): [] for g in grid}
    for m in models.modules().values():
        m.eval()
    progress.start(f"answer questions ({retriever.name})", len(questions), "questions")
    with torch.inference_mode():
        for s in range(0, len(questions), batch_size):
            batch = questions[s:s + batch_size]
            proposal = retriever.propose(batch)  # (B, K)
            if proposal.ids.shape[1] == 0:  # nothing retrieved: an extractive reader has no span
                for key in out:
                    out[key] += [Prediction("", 0.0, [], []) for _ in batch]
                progress.advance(len(batch))
                continue
            q_ids = [tokenizer(q.question, truncation=True, max_length=config.question_length)["input_ids"]
                     for q in batch]
            rows = reader_rows(q_ids, proposal.ids, blocks, config.reader_length, tokenizer.sep_token_id,
                               tokenizer.pad_token_id)
            with place.compute():
                span_scores = read_by_length(models.reader, rows.input_ids, rows.attention_mask, rows.body_mask,
                                             rows.token_type_ids, row_tokens, place.device)  # (B, K, T, L)
            b, k, t, length = span_scores.shape
            for form, temperature in grid:
                log_p_z = retrieval_log_p(retriever, batch, proposal, temperature)  # (B, K)
                joint = span_log_probs(span_scores, log_p_z, form).reshape(b, -1)  # (B, K*S)
                top = torch.topk(joint, min(answer_candidates, joint.size(1)), dim=-1)
                for i in range(b):
                    out[(form, temperature) if forms else temperature].append(_decode(top.values[i].tolist(), top.indices[i].tolist(), proposal.ids[i],
                                                    rows.body_start[i], rows.body_len[i], blocks, t, length))
            progress.advance(len(batch))
    progress.finish()
    return out


def _decode(values: list[float], flats: list[int], block_ids: np.ndarray, body_start: list[int],
            body_len: list[int], blocks: BlockStore, t: int, length: int) -> Prediction:
    """Sum the probability of (block, span) pairs that read as the same normalised answer."""
    mass: dict[str, list[Any]] = {}  # key -> [log p, text, block, start, end]
    for value, flat in zip(values, flats, strict=True):
        if value < -1e8:  # masked: outside a block body
            continue
        j, rest = divmod(flat, t * length)
        start, span = divmod(rest, length)
        z = int(block_ids[j])
        offsets = blocks.pieces(z)[2]
        first = start - body_start[j]
        a, e = offsets[first][0], offsets[first + span][1]
        text = blocks.texts[z][a:e]
        key = normalize_answer(text)
        if key in mass:
            mass[key][0] = float(np.logaddexp(mass[key][0], value))
        else:
            mass[key] = [value, text, z, a, e]
    ids = [int(z) for z in block_ids]
    if not mass:
        return Prediction("", 0.0, ids, list(body_len))
    ranked = sorted(mass.values(), key=lambda m: -m[0])
    best = ranked[0]
    return Prediction(best[1], math.exp(best[0]), ids, list(body_len), best[2], best[3], best[4],
                      [(m[1], math.exp(m[0])) for m in ranked[1:6]])


def _setting_name(setting: Any) -> str:
    if isinstance(setting, tuple):
        return f"{setting[0]}, {_setting_name(setting[1])}"
    return "uniform" if setting is None else f"{setting:g}"


def fit_temperature(span_predictions: dict[Any, list[Prediction]], questions: list[QAQuestion]
                    ) -> tuple[Any, dict[str, float]]:
    """The setting (a retrieval temperature, or a (form, temperature) pair) whose predictions
    answer the most dev questions (ties: the first in the given order), and each candidate's
    dev exact match."""
    scores: dict[str, float] = {}
    best: tuple[float, Any] | None = None
    for setting, preds in span_predictions.items():
        em = float(np.mean([answer_correct(p.answer, q) for p, q in zip(preds, questions, strict=True)]))
        scores[_setting_name(setting)] = em
        if best is None or em > best[0]:
            best = (em, setting)
    assert best is not None
    return best[1], scores


