"""Inverse Cloze Task (ORQA, Lee et al. 2019; REALM §3.4 warm start of the retriever).

A pseudo-query is one sentence of a block; its positive context is the block without that
sentence (kept in 10% of examples, so the retriever also learns word overlap), `[CLS] title
[SEP] context [SEP]`. The other contexts of the batch are the negatives: scores = Q · Dᵀ and a
cross-entropy towards the diagonal. The query encoder and the document encoder have separate
weights, both starting from the same BERT.

Data order is a function of (seed, step), so a run resumed from a checkpoint draws the same
batches as one that never stopped.

Shapes: B batch, T tokens, D embedding dim, S sentences of the corpus.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from realm_core.config import ICTConfig
from realm_core.errors import InputError
from realm_core.progress import NoProgress, Progress

if TYPE_CHECKING:
    from realm_core.distributed import Placement


@dataclass
class ClozeCorpus:
    """Blocks with at least two usable sentences, and their sentence char ranges."""

    titles: pa.Array
    texts: pa.Array
    sentence_offsets: np.ndarray  # (S+1,) sentences of block b: rows offsets[b]..offsets[b+1]
    starts: np.ndarray            # (S,) char start of each sentence in its block text
    ends: np.ndarray              # (S,)
    block_ids: np.ndarray         # (n_blocks,) original block ids

    def __len__(self) -> int:
        return len(self.block_ids)


def cloze_corpus(blocks: pa.Table, sentences: pa.Table, min_sentence_chars: int,
                 source: str = "blocks") -> ClozeCorpus:
    """Join blocks with their sentences; keep blocks where a query sentence leaves context behind."""
    sentences = sentences.sort_by([("block_id", "ascending"), ("sentence", "ascending")])
    s_block = sentences.column("block_id").to_numpy()
    s_start = sentences.column("char_start").to_numpy()
    s_end = sentences.column("char_end").to_numpy()
    keep_sentence = (s_end - s_start) >= min_sentence_chars
    block_ids = blocks.column("block_id").to_numpy()
    first = np.searchsorted(s_block, block_ids, side="left")
    last = np.searchsorted(s_block, block_ids, side="right")
    n_sentences = last - first
    kept_before = np.concatenate([[0], np.cumsum(keep_sentence)])  # (S+1,)
    usable = kept_before[last] - kept_before[first]
    chosen = np.flatnonzero((n_sentences >= 2) & (usable >= 1))
    if len(chosen) == 0:
        raise InputError(source, "blocks with at least two sentences for the inverse cloze task",
                         found=f"{len(block_ids)} blocks, none usable")
    rows: list[np.ndarray] = []
    offsets = [0]
    for b in chosen:
        idx = np.arange(first[b], last[b])
        idx = idx[keep_sentence[idx]]
        rows.append(idx)
        offsets.append(offsets[-1] + len(idx))
    flat = np.concatenate(rows)
    taken = blocks.take(pa.array(chosen))
    return ClozeCorpus(taken.column("title").combine_chunks(), taken.column("text").combine_chunks(),
                       np.asarray(offsets, dtype=np.int64), s_start[flat], s_end[flat], block_ids[chosen])


def inverse_cloze_batch(corpus: ClozeCorpus, batch_size: int, keep_sentence_prob: float,
                        rng: np.random.Generator) -> tuple[list[str], list[str], list[str]]:
    """(queries, titles, contexts) for distinct blocks: no block is its own in-batch negative."""
    picks = rng.choice(len(corpus), size=min(batch_size, len(corpus)), replace=False)
    queries, titles, contexts = [], [], []
    for b in picks:
        lo, hi = corpus.sentence_offsets[b], corpus.sentence_offsets[b + 1]
        s = int(rng.integers(lo, hi))
        text = corpus.texts[int(b)].as_py()
        a, z = int(corpus.starts[s]), int(corpus.ends[s])
        queries.append(text[a:z].strip())
        keep = rng.random() < keep_sentence_prob
        contexts.append(text if keep else (text[:a].rstrip() + " " + text[z:].lstrip()).strip())
        titles.append(corpus.titles[int(b)].as_py())
    return queries, titles, contexts


def in_batch_loss(q: Any, d: Any) -> tuple[Any, Any]:
    """In-batch softmax cross-entropy (ORQA eq. 3) of query (B, D) and context (B, D)
    embeddings; returns (loss, top-1 accuracy)."""
    import torch

    scores = (q @ d.T).float()  # (B, B)
    target = torch.arange(len(q), device=q.device)
    loss = torch.nn.functional.cross_entropy(scores, target)
    accuracy = (scores.argmax(-1) == target).float().mean()
    return loss, accuracy


def _rng_state() -> tuple[Any, Any]:
    import torch

    cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if cuda else None)


def _set_rng_state(state: tuple[Any, Any]) -> None:
    import torch

    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def inverse_cloze_step(query_encoder: Any, doc_encoder: Any, queries: dict[str, Any], blocks: dict[str, Any],
                       micro_batch: int = 0) -> tuple[Any, Any]:
    """One batch's loss and accuracy, with the loss's gradients accumulated in both encoders.

    `micro_batch` in (0, B) bounds memory by the micro-batch, not the batch, at the cost of a
    second forward (GradCache, Gao et al. 2021): every micro-batch is embedded without a graph,
    the in-batch loss over all B x B scores gives the gradient of each embedding, and each
    micro-batch is embedded again with a graph, from the random state of its first pass (the
    same dropout masks), and back-propagates its rows of that gradient. The gradients are the
    whole batch's; every other context stays a negative of every query."""
    import torch

    n = len(queries["input_ids"])
    if micro_batch <= 0 or micro_batch >= n:
        q = query_encoder(queries["input_ids"], queries["attention_mask"])  # (B, D)
        d = doc_encoder(blocks["input_ids"], blocks["attention_mask"])       # (B, D)
        loss, accuracy = in_batch_loss(q, d)
        loss.backward()
        return loss.detach(), accuracy
    parts = [slice(s, s + micro_batch) for s in range(0, n, micro_batch)]
    states, q_parts, d_parts = [], [], []
    with torch.no_grad():
        for part in parts:
            states.append(_rng_state())
            q_parts.append(query_encoder(queries["input_ids"][part], queries["attention_mask"][part]))
            d_parts.append(doc_encoder(blocks["input_ids"][part], blocks["attention_mask"][part]))
    q = torch.cat(q_parts).requires_grad_()  # (B, D), leaves: the loss's gradient lands here
    d = torch.cat(d_parts).requires_grad_()
    loss, accuracy = in_batch_loss(q, d)
    loss.backward()
    q_grad, d_grad = q.grad, d.grad
    assert q_grad is not None and d_grad is not None
    for part, state in zip(parts, states, strict=True):
        _set_rng_state(state)
        q_part = query_encoder(queries["input_ids"][part], queries["attention_mask"][part])
        d_part = doc_encoder(blocks["input_ids"][part], blocks["attention_mask"][part])
        torch.autograd.backward([q_part, d_part], [q_grad[part], d_grad[part]])
    return loss.detach(), accuracy


class PaddedBatches:
    """Input ids and attention masks of a batch, as `tokenizer(..., truncation=truncation,
    max_length=max_length, padding=True, return_tensors="pt")` gives them, through a private
    copy of its Rust tokeniser set to truncate and pad, without the HF call's Python work per
    row: on a GPU the paper preset's 4,096 x 288 batch took 1.6-1.9 s to tokenise by the HF
    call, 28-30% of an ICT step (bench/results/gpu.json, gpu_ict_run.json); this is 1.8-2.0x
    faster on 2 CPU cores (bench/results/ict_tokenise.json)."""

    def __init__(self, tokenizer: Any, max_length: int, truncation: str = "longest_first") -> None:
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.backend.enable_truncation(max_length, strategy=truncation)
        self.backend.enable_padding(pad_id=tokenizer.pad_token_id, pad_token=tokenizer.pad_token)

    def __call__(self, inputs: list[str] | list[tuple[str, str]]) -> dict[str, Any]:
        import torch

        encodings = self.backend.encode_batch(inputs)
        return {"input_ids": torch.tensor(np.array([e.ids for e in encodings], dtype=np.int64)),
                "attention_mask": torch.tensor(np.array([e.attention_mask for e in encodings], dtype=np.int64))}


@dataclass
class LossPoint:
    step: int
    loss: float
    accuracy: float
    learning_rate: float
    seconds: float


def train_inverse_cloze(corpus: ClozeCorpus, query_encoder: Any, doc_encoder: Any, tokenizer: Any,
                        config: ICTConfig, checkpoint_root: Path, progress: Progress | None = None,
                        on_log: Callable[[LossPoint], None] | None = None,
                        placement: Placement | None = None) -> list[LossPoint]:
    """Train both encoders in place for `config.steps` steps, resuming from the newest checkpoint
    under `checkpoint_root`. Returns the loss curve of the whole run (resumed part included).
    The encoders are on `placement`'s device (default: the CPU, fp32); its precision is the
    forwards' autocast."""
    import torch

    from realm_core.distributed import Placement
    from realm_core.retrieval.embed import tokenizer_parallel_for, tokenizer_parallelism
    from realm_core.training import (
        adamw,
        latest_checkpoint,
        learning_rate_at,
        record_step,
        restore_checkpoint,
        set_learning_rate,
        step_seed,
    )

    progress = progress or NoProgress()
    placement = placement or Placement.single()
    # on an accelerator one tokeniser thread cannot keep up (bench/gpu.py): its own pool, as embed's
    pool = tokenizer_parallel_for("auto", placement.device)
    modules = {"query_encoder": query_encoder, "doc_encoder": doc_encoder}
    optimizer = adamw([query_encoder, doc_encoder], config.learning_rate, config.weight_decay)
    curve: list[LossPoint] = []
    start = 0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, modules, optimizer)
        start = ckpt.step
        curve = [LossPoint(**p) for p in ckpt.state["curve"]]
    progress.start("inverse cloze task", config.steps, "steps")
    progress.advance(start)
    query_encoder.train()
    doc_encoder.train()

    encode_queries = PaddedBatches(tokenizer, config.query_length)
    encode_blocks = PaddedBatches(tokenizer, config.block_length, "only_second")

    def host_batch(step: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Step `step`'s tokenised queries and contexts on the host: a function of (seed, step)."""
        rng = np.random.default_rng(step_seed(config.seed, step))
        queries, titles, contexts = inverse_cloze_batch(corpus, config.batch_size,
                                                        config.keep_sentence_prob, rng)
        return encode_queries(queries), encode_blocks(list(zip(titles, contexts, strict=True)))

    began = time.perf_counter()
    # the next batch is drawn and tokenised on a thread while this step runs
    with ThreadPoolExecutor(1, thread_name_prefix="ict-batches") as ahead, tokenizer_parallelism(pool):
        upcoming = ahead.submit(host_batch, start)  # an extra batch when resumed at the end
        for step in range(start, config.steps):
            q, d = ({k: v.to(placement.device) for k, v in x.items()} for x in upcoming.result())
            upcoming = ahead.submit(host_batch, step + 1) if step + 1 < config.steps else upcoming
            lr = learning_rate_at(step, config.learning_rate, config.warmup_steps, config.steps)
            set_learning_rate(optimizer, lr)
            # forward, backward, clip, step
            torch.manual_seed(step_seed(config.seed, step, stream=1))  # dropout masks
            optimizer.zero_grad(set_to_none=True)
            with placement.compute():
                loss, accuracy = inverse_cloze_step(query_encoder, doc_encoder, q, d, config.micro_batch)
            torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                           config.max_grad_norm)
            optimizer.step()
            # log, checkpoint
            point = LossPoint(step + 1, loss.item(), accuracy.item(), lr, time.perf_counter() - began)
            record_step(point, curve, config, progress, on_log, checkpoint_root, modules, optimizer)
    progress.finish()
    query_encoder.step = doc_encoder.step = config.steps
    return curve
