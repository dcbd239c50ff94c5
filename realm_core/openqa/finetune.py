"""Open-QA fine-tuning and prediction (REALM §3.3-§3.4), top to bottom like the pretraining loop:

    get batch -> retrieve top-k (frozen index) -> relevance with the current query encoder
    -> span reader -> marginal likelihood over blocks and matching spans -> backward -> step

The document encoder and the index are frozen: p(z|x) is the current query embedding against
the blocks' stored embeddings, so the query encoder learns without re-embedding anything.
BM25 proposes blocks with no trainable retriever (uniform p(z|x)); the null system retrieves
nothing, so an extractive reader has no span to answer from.

Shapes: B questions, K blocks, T tokens, L max span length, D embedding dim, N blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from realm_core.config import FinetuneConfig
from realm_core.distributed import Placement
from realm_core.openqa.answers import has_answer, normalize_answer, regex_match, token_string
from realm_core.openqa.span_reader import SpanReader, gold_spans, span_marginal_likelihood
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.embed import pad_sequences
from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
    step_seed,
)


@dataclass(frozen=True)
class QAQuestion:
    qid: str
    question: str
    answers: tuple[str, ...]
    match: Literal["text", "regex"] = "text"


class BlockStore:
    """Block titles and bodies, their wordpieces with character offsets (cached on first use)
    and their DPR token strings for answer tests."""

    def __init__(self, titles: list[str], texts: list[str], tokenizer: Any) -> None:
        self.titles, self.texts, self.tokenizer = titles, texts, tokenizer
        self._pieces: dict[int, tuple[list[int], list[int], list[tuple[int, int]]]] = {}
        self._tokens: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.texts)

    def pieces(self, block: int) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """(title ids, body ids, body character offsets)."""
        if block not in self._pieces:
            title = self.tokenizer(self.titles[block], add_special_tokens=False)["input_ids"]
            body = self.tokenizer(self.texts[block], add_special_tokens=False, return_offsets_mapping=True)
            self._pieces[block] = (title, body["input_ids"], [tuple(o) for o in body["offset_mapping"]])
        return self._pieces[block]

    def tokens(self, block: int) -> str:
        if block not in self._tokens:
            self._tokens[block] = token_string(self.texts[block])
        return self._tokens[block]

    def holds_answer(self, q: QAQuestion, block: int) -> bool:
        """DPR's has_answer on the block text; CuratedTREC: a regex found in it."""
        if q.match == "regex":
            return regex_match(q.answers, self.texts[block])
        return has_answer(q.answers, self.tokens(block))


class QARetriever:
    """Proposes top-k blocks and scores them: log p(z|x) (B, K).

    dense: the query encoder against the frozen block embeddings (faiss flat inner product);
    bm25: bm25s over title + body, uniform p(z|x); none: no blocks."""

    def __init__(self, kind: Literal["dense", "bm25", "none"], blocks: BlockStore, top_k: int,
                 question_length: int, query_encoder: Any = None, tokenizer: Any = None,
                 block_vectors: np.ndarray | None = None) -> None:
        self.kind, self.blocks, self.top_k = kind, blocks, top_k if kind != "none" else 0
        self.question_length = question_length
        self.query_encoder, self.tokenizer = query_encoder, tokenizer
        self.index: Any = None
        self.vectors: torch.Tensor | None = None
        if kind == "dense":
            from realm_core.retrieval.index import MipsIndex

            assert block_vectors is not None and query_encoder is not None
            self.index = MipsIndex.build(block_vectors.shape[1], "Flat")
            self.index.add(block_vectors, np.arange(len(block_vectors), dtype=np.int64))
            self.vectors = torch.from_numpy(np.ascontiguousarray(block_vectors, dtype=np.float32))
        elif kind == "bm25":
            import bm25s
            import Stemmer

            self._stemmer = Stemmer.Stemmer("english")
            corpus = bm25s.tokenize([f"{t} {b}" for t, b in zip(blocks.titles, blocks.texts, strict=True)],
                                    stopwords="en", stemmer=self._stemmer, show_progress=False)
            self.index = bm25s.BM25()
            self.index.index(corpus, show_progress=False)

    def propose(self, questions: list[str]) -> np.ndarray:
        """(B, K) block ids, no gradient."""
        if self.kind == "none":
            return np.zeros((len(questions), 0), dtype=np.int64)
        if self.kind == "bm25":
            import bm25s

            tokens = bm25s.tokenize(questions, stopwords="en", stemmer=self._stemmer, return_ids=False,
                                    show_progress=False)
            tokens = [t if t else ["[empty]"] for t in tokens]  # a stop-word-only question
            rows, _ = self.index.retrieve(tokens, k=self.top_k, show_progress=False)
            return np.asarray(rows, dtype=np.int64)
        with torch.no_grad():
            q = self.embed(questions)
        _, ids = self.index.search(q.float().cpu().numpy(), self.top_k)
        return np.asarray(ids, dtype=np.int64)

    def embed(self, questions: list[str]) -> torch.Tensor:
        enc = self.tokenizer(questions, truncation=True, max_length=self.question_length,
                             return_attention_mask=False)["input_ids"]
        ids, mask = pad_sequences(enc, self.tokenizer.pad_token_id)
        device = next(self.query_encoder.parameters()).device
        out: torch.Tensor = self.query_encoder(ids.to(device), mask.to(device)).float()  # (B, D)
        return out

    def log_p_z(self, questions: list[str], block_ids: np.ndarray) -> torch.Tensor:
        """(B, K) log p(z|x) over the proposed blocks; differentiable in the query encoder."""
        b, k = block_ids.shape
        if self.kind != "dense":
            return torch.full((b, k), -math.log(max(k, 1)))
        assert self.vectors is not None
        q = self.embed(questions)  # (B, D)
        vectors = self.vectors[torch.from_numpy(block_ids)].to(q.device)  # (B, K, D)
        scores = torch.einsum("bd,bkd->bk", q, vectors)  # (B, K)
        return torch.log_softmax(scores, dim=-1)


@dataclass
class ReaderRows:
    input_ids: torch.Tensor        # (B, K, T)
    attention_mask: torch.Tensor   # (B, K, T)
    body_mask: torch.Tensor        # (B, K, T) True on block-body tokens
    body_start: list[list[int]]    # (B, K) row position of the first body token
    body_len: list[list[int]]      # (B, K) body tokens kept


def reader_rows(question_ids: list[list[int]], block_ids: np.ndarray, blocks: BlockStore,
                reader_length: int, sep_id: int, pad_id: int) -> ReaderRows:
    """`[CLS] x [SEP] title [SEP] body [SEP]` per (question, block), the body cut to fit."""
    b, k = block_ids.shape
    seqs: list[list[int]] = []
    masks: list[list[bool]] = []
    starts: list[list[int]] = []
    lens: list[list[int]] = []
    for q_ids, row in zip(question_ids, block_ids, strict=True):
        starts.append([])
        lens.append([])
        for z in row:
            title, body, _ = blocks.pieces(int(z))
            head = list(q_ids) + title[:max(reader_length - len(q_ids) - 3, 0)] + [sep_id]
            kept = body[:max(reader_length - len(head) - 1, 0)]
            seqs.append(head + kept + [sep_id])
            masks.append([False] * len(head) + [True] * len(kept) + [False])
            starts[-1].append(len(head))
            lens[-1].append(len(kept))
    ids, attention = pad_sequences(seqs, pad_id)  # (B*K, T)
    t = ids.size(1)
    body_mask = torch.zeros((b * k, t), dtype=torch.bool)
    for i, m in enumerate(masks):
        body_mask[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
    return ReaderRows(ids.view(b, k, t), attention.view(b, k, t), body_mask.view(b, k, t), starts, lens)


def gold_tensor(rows: ReaderRows, answers: list[list[list[int]]], max_span_length: int) -> torch.Tensor:
    """(B, K, T, L) spans whose wordpieces equal an answer's (every occurrence counts)."""
    b, k, t = rows.input_ids.shape
    gold = torch.zeros((b, k, t, max_span_length), dtype=torch.bool)
    for i in range(b):
        for j in range(k):
            gold[i, j] = gold_spans(rows.input_ids[i, j].tolist(), rows.body_mask[i, j].tolist(),
                                    answers[i], max_span_length)
    return gold


@dataclass
class QAModels:
    reader: SpanReader
    query_encoder: Any  # RetrieverEncoder or None (BM25, null)

    def modules(self) -> dict[str, torch.nn.Module]:
        out: dict[str, torch.nn.Module] = {"reader": self.reader}
        if self.query_encoder is not None:
            out["query_encoder"] = self.query_encoder
        return out


@dataclass
class FinetuneCurves:
    steps: list[dict[str, float]] = field(default_factory=list)


def _answer_ids(q: QAQuestion, tokenizer: Any) -> list[list[int]]:
    if q.match == "regex":  # a regex is not a span to find; it is matched against predictions
        return []
    return [tokenizer(a, add_special_tokens=False)["input_ids"] for a in q.answers]


def finetune(models: QAModels, retriever: QARetriever, questions: list[QAQuestion], blocks: BlockStore,
             tokenizer: Any, config: FinetuneConfig, checkpoint_root: Path,
             progress: Progress | None = None, placement: Placement | None = None) -> FinetuneCurves:
    """Train in place for `config.steps` steps; resumes from the newest checkpoint.

    Each step draws up to draw_factor x batch_size questions (a function of seed and step) and
    keeps the first batch_size whose retrieved blocks hold an answer: the others have no gold
    span and give no gradient (REALM and ORQA train only on those).

    Under torchrun every rank finds the same batch and reads its slice of it; the gradients are
    summed over ranks, each rank's loss already divided by the batch's global count, so a step is
    the one-process step. (Not DDP's hooks: a rank whose slice has no finite loss runs no
    backward at all.)"""
    place = placement or Placement.single()
    progress = progress or NoProgress()
    for m in models.modules().values():
        m.to(place.device)
    train_retriever = retriever.kind == "dense" and config.train_query_encoder
    trainable = [models.reader] + ([models.query_encoder] if train_retriever else [])
    optimizer = adamw(trainable, config.learning_rate, config.weight_decay)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    curves, start = FinetuneCurves(), 0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, models.modules(), optimizer)
        start, curves = ckpt.step, FinetuneCurves(ckpt.state["curves"])
    for m in models.modules().values():
        m.train()
    progress.start(f"fine-tune open-QA reader ({retriever.kind})", config.steps, "steps")
    progress.advance(start)
    for step in range(start, config.steps):
        # get batch: questions whose top-k blocks hold an answer
        rng = np.random.default_rng(step_seed(config.seed, step))
        drawn = rng.choice(len(questions), size=min(len(questions), config.batch_size * config.draw_factor),
                           replace=False)
        candidates = [questions[i] for i in drawn]
        proposed = retriever.propose([q.question for q in candidates])  # (draw, K)
        with_gold = [i for i, row in enumerate(proposed)
                     if any(blocks.holds_answer(candidates[i], int(z)) for z in row)]
        usable = with_gold[:config.batch_size]
        lr = learning_rate_at(step, config.learning_rate, config.warmup_steps, config.steps)
        set_learning_rate(optimizer, lr)
        torch.manual_seed(step_seed(config.seed, step, stream=1 + place.rank))  # dropout masks
        optimizer.zero_grad(set_to_none=True)
        row = {"step": float(step + 1), "learning_rate": lr, "loss": float("nan"),
               "with_gold": len(with_gold) / max(len(candidates), 1), "questions": float(len(usable))}
        mine = place.shard(usable)  # this rank's slice of the batch
        log_p_y = torch.zeros(0)
        if mine:
            batch = [candidates[i] for i in mine]
            block_ids = proposed[mine]  # (B, K)
            q_ids = [tokenizer(q.question, truncation=True, max_length=config.question_length)["input_ids"]
                     for q in batch]
            rows = reader_rows(q_ids, block_ids, blocks, config.reader_length, tokenizer.sep_token_id,
                               tokenizer.pad_token_id)
            gold = gold_tensor(rows, [_answer_ids(q, tokenizer) for q in batch], config.max_span_length)
            with torch.set_grad_enabled(train_retriever), place.autocast():
                log_p_z = retriever.log_p_z([q.question for q in batch], block_ids)  # (B, K)
            with place.autocast():
                span_scores = models.reader(rows.input_ids.to(place.device), rows.attention_mask.to(place.device),
                                            rows.body_mask.to(place.device))  # (B, K, T, L)
            log_p_y = span_marginal_likelihood(span_scores.float(), gold.to(place.device), log_p_z.float())  # (B,)
        finite = torch.isfinite(log_p_y)  # an answer in the text but not as whole wordpieces
        local_sum = -log_p_y[finite].sum() if bool(finite.any()) else None
        n_finite, loss_sum = place.sum([float(finite.sum()), float(local_sum.detach()) if local_sum is not None else 0.0])
        if n_finite > 0:  # every rank agrees: the same step is taken everywhere
            if local_sum is not None:
                (local_sum / n_finite).backward()  # type: ignore[no-untyped-call]
            place.sum_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            row["loss"] = loss_sum / n_finite
            if not math.isfinite(row["loss"]):
                raise FloatingPointError(f"step {step + 1}: loss is {row['loss']}; lower "
                                         "finetune.learning_rate")
        curves.steps.append(row)
        progress.advance(1)
        done = step + 1
        if done % config.checkpoint_every == 0 or done == config.steps:
            if place.is_main:
                save_checkpoint(checkpoint_root, done, models.modules(), optimizer, {"curves": curves.steps})
            place.barrier()
    progress.finish()
    for m in models.modules().values():
        m.eval()
    return curves


@dataclass
class Prediction:
    answer: str
    score: float            # p(answer|x), summed over the spans that read as this answer
    block_ids: list[int]


def predict(models: QAModels, retriever: QARetriever, questions: list[QAQuestion], blocks: BlockStore,
            tokenizer: Any, config: FinetuneConfig, answer_candidates: int, batch_size: int,
            progress: Progress | None = None) -> list[Prediction]:
    """The most probable answer string per question: p(y|x) = sum_z p(z|x) p(y|z,x), summed
    over the `answer_candidates` best (block, span) pairs that normalise to the same string."""
    progress = progress or NoProgress()
    out: list[Prediction] = []
    for m in models.modules().values():
        m.eval()
    progress.start(f"answer questions ({retriever.kind})", len(questions), "questions")
    with torch.inference_mode():
        for s in range(0, len(questions), batch_size):
            batch = questions[s:s + batch_size]
            block_ids = retriever.propose([q.question for q in batch])  # (B, K)
            if block_ids.shape[1] == 0:  # nothing retrieved: an extractive reader has no span
                out += [Prediction("", 0.0, []) for _ in batch]
                progress.advance(len(batch))
                continue
            q_ids = [tokenizer(q.question, truncation=True, max_length=config.question_length)["input_ids"]
                     for q in batch]
            rows = reader_rows(q_ids, block_ids, blocks, config.reader_length, tokenizer.sep_token_id,
                               tokenizer.pad_token_id)
            log_p_z = retriever.log_p_z([q.question for q in batch], block_ids)  # (B, K)
            span_scores = models.reader(rows.input_ids, rows.attention_mask, rows.body_mask)  # (B, K, T, L)
            b, k, t, length = span_scores.shape
            log_p_s = torch.log_softmax(span_scores.reshape(b, k, -1), dim=-1)  # within each block
            joint = torch.nan_to_num(log_p_s + log_p_z[:, :, None], nan=float("-inf")).reshape(b, -1)
            top = torch.topk(joint, min(answer_candidates, joint.size(1)), dim=-1)
            for i in range(b):
                mass: dict[str, tuple[float, str]] = {}
                for value, flat in zip(top.values[i].tolist(), top.indices[i].tolist(), strict=True):
                    if not math.isfinite(value):
                        continue
                    j, rest = divmod(flat, t * length)
                    start, span = divmod(rest, length)
                    z = int(block_ids[i, j])
                    offsets = blocks.pieces(z)[2]
                    first = start - rows.body_start[i][j]
                    text = blocks.texts[z][offsets[first][0]:offsets[first + span][1]]
                    key = normalize_answer(text)
                    total, shown = mass.get(key, (float("-inf"), text))
                    mass[key] = (float(np.logaddexp(total, value)), shown)
                if mass:
                    best, shown = max(mass.values())
                    out.append(Prediction(shown, math.exp(best), [int(z) for z in block_ids[i]]))
                else:
                    out.append(Prediction("", 0.0, [int(z) for z in block_ids[i]]))
            progress.advance(len(batch))
    progress.finish()
    return out
