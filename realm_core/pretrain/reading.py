"""Does the pretraining reader read? The oracle block, on real text and on the mechanism corpus.

REALM's gain needs two things at once: a retriever that brings a block holding the masked span,
and a reader that copies the span from it. A held-out accuracy below the null-only baseline does
not say which is missing. These functions take retrieval out of the question:

- `oracle_blocks`: for each example, the block a perfect retriever would bring: among the blocks
  that hold the masked span as whole words and are not a trivial retrieval of the query (the
  rule pretraining applies), the one the given retriever scores highest, and that block's rank
  among every allowed block (how far retrieval is from bringing it).
- `read_blocks`: the reader's prediction reading the null block alone and reading the given
  block alone, per example, and whether that block, cut as the reader reads it, still holds the
  span. Reading the block minus reading nothing is what copying is worth to this reader.

Shapes: E examples, N blocks, D embedding dim, B batch, M masked positions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from realm_core.pretrain.batches import BlockTexts, reader_batch
from realm_core.pretrain.heldout import SpanLocator, allowed, answer_retrieved, masked_runs
from realm_core.spans.masking import MaskedExample


@dataclass(frozen=True)
class OracleBlocks:
    block: np.ndarray    # (E,) the best-scored allowed block holding the span; -1 where none does
    rank: np.ndarray     # (E,) 1-based rank of that block among all allowed blocks; 0 where none
    holders: np.ndarray  # (E,) how many allowed blocks hold the span


def oracle_blocks(examples: Sequence[MaskedExample], query_vectors: np.ndarray, block_vectors: np.ndarray,
                  locator: SpanLocator, blocks: BlockTexts, exclusion: str) -> OracleBlocks:
    """The allowed block holding each example's span that the retriever scores highest.

    query_vectors: (E, D); block_vectors: (N, D), the index's vectors of every block."""
    if len(query_vectors) != len(examples):
        raise ValueError(f"{len(query_vectors)} query vectors for {len(examples)} examples")
    best = np.full(len(examples), -1, dtype=np.int64)
    rank = np.zeros(len(examples), dtype=np.int64)
    count = np.zeros(len(examples), dtype=np.int64)
    for i, ex in enumerate(examples):
        runs = masked_runs(ex)
        holders = set.intersection(*(locator.blocks_with(run) for run in runs)) if runs else set()
        ok = np.asarray(sorted(z for z in holders if allowed(z, ex, blocks, exclusion)), dtype=np.int64)
        count[i] = len(ok)
        if not len(ok):
            continue
        scores = block_vectors @ query_vectors[i]  # (N,)
        z = int(ok[np.argmax(scores[ok])])
        best[i] = z
        higher = np.flatnonzero(scores > scores[z])  # (<N,) blocks ranked above it
        rank[i] = 1 + sum(allowed(int(h), ex, blocks, exclusion) for h in higher)
    return OracleBlocks(best, rank, count)


@dataclass(frozen=True)
class Reading:
    null_correct: np.ndarray   # (E,) every masked wordpiece right reading the null block alone
    block_correct: np.ndarray  # (E,) the same reading the given block alone
    block_holds: np.ndarray    # (E,) the block, cut to the reader's length, still holds the span


def read_blocks(reader: Any, examples: Sequence[MaskedExample], chosen: np.ndarray, blocks: BlockTexts,
                tokenizer: Any, reader_length: int, continuation: set[int], batch_size: int = 16,
                compute: Callable[[], AbstractContextManager[Any]] = nullcontext,
                progress: Callable[[int], None] | None = None) -> Reading:
    """The reader's span prediction for each example reading the null block alone and reading its
    `chosen` block alone (chosen: (E,) block ids, every one >= 0); `compute` is the context the
    forward runs in (bf16 autocast where the run used it)."""
    import torch

    if len(chosen) != len(examples) or (len(chosen) and int(np.min(chosen)) < 0):
        raise ValueError("read_blocks needs one block id >= 0 per example")
    reader.eval()
    null_c, block_c, holds = [], [], []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = list(examples[start:start + batch_size])
            batch = reader_batch(chunk, chosen[start:start + len(chunk), None], blocks, tokenizer, reader_length)
            with compute():
                log_probs = reader(batch.input_ids, batch.attention_mask, batch.masked_positions)  # (B, 2, M, V)
            right = (log_probs.argmax(-1) == batch.targets[:, None]) | ~batch.target_mask[:, None]  # (B, 2, M)
            every = right.all(-1).numpy()  # (B, 2)
            null_c.append(every[:, 0])
            block_c.append(every[:, 1])
            holds.append(answer_retrieved(chunk, batch.input_ids.numpy(), batch.block_mask.numpy(), continuation))
            if progress is not None:
                progress(len(chunk))
    cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, dtype=bool))  # noqa: E731
    return Reading(cat(null_c), cat(block_c), cat(holds))
