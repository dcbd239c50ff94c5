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

Shapes: E examples, N blocks, C candidate blocks, D embedding dim, B batch, M masked positions,
V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from realm_core.pretrain.batches import BlockTexts, reader_batch
from realm_core.pretrain.heldout import SpanLocator, answer_retrieved, masked_runs
from realm_core.spans.masking import MaskedExample

if TYPE_CHECKING:
    from realm_core.pretrain.reader_training import Evaluate


@dataclass(frozen=True)
class OracleBlocks:
    block: np.ndarray    # (E,) the best-scored allowed block holding the span; -1 where none does
    rank: np.ndarray     # (E,) 1-based rank of that block among all allowed blocks; 0 where none or not asked
    holders: np.ndarray  # (E,) how many allowed blocks hold the span


def allowed_among(candidates: np.ndarray, example: MaskedExample, blocks: BlockTexts, exclusion: str) -> np.ndarray:
    """(C,) `heldout.allowed` for each of `candidates` (C,) at once."""
    own_doc, own_title = blocks.doc_ids[example.block_id], blocks.title_keys[example.block_id]
    docs, titles = blocks.doc_ids[candidates], blocks.title_keys[candidates]
    if exclusion == "article":
        return np.asarray((docs != own_doc) & (titles != own_title), dtype=bool)
    return np.asarray((candidates != example.block_id) & ((docs == own_doc) | (titles != own_title)), dtype=bool)


def allowed_holders(example: MaskedExample, locator: SpanLocator, blocks: BlockTexts, exclusion: str) -> np.ndarray:
    """(C,) the blocks, in id order, that hold the example's masked span as whole words and are
    not a trivial retrieval of its query (pretraining's exclusion rule); empty where none does."""
    runs = masked_runs(example)
    holders = set.intersection(*(locator.blocks_with(run) for run in runs)) if runs else set()
    held = np.asarray(sorted(holders), dtype=np.int64)
    return held[allowed_among(held, example, blocks, exclusion)] if len(held) else held


def oracle_blocks(examples: Sequence[MaskedExample], query_vectors: np.ndarray, block_vectors: np.ndarray,
                  locator: SpanLocator, blocks: BlockTexts, exclusion: str, ranks: bool = True,
                  readable: np.ndarray | None = None) -> OracleBlocks:
    """The allowed block holding each example's span that the retriever scores highest, and (with
    `ranks`) its rank among the allowed blocks; `readable` (N,) bool, given, keeps the holders to
    the blocks it marks (the reader warm start reads no block of a held-out article).

    query_vectors: (E, D); block_vectors: (N, D), the index's vectors of every block."""
    if len(query_vectors) != len(examples):
        raise ValueError(f"{len(query_vectors)} query vectors for {len(examples)} examples")
    best = np.full(len(examples), -1, dtype=np.int64)
    rank = np.zeros(len(examples), dtype=np.int64)
    count = np.zeros(len(examples), dtype=np.int64)
    for i, ex in enumerate(examples):
        ok = allowed_holders(ex, locator, blocks, exclusion)
        if readable is not None:
            ok = ok[readable[ok]]
        count[i] = len(ok)
        if not len(ok):
            continue
        scores = block_vectors @ query_vectors[i]  # (N,)
        z = int(ok[np.argmax(scores[ok])])
        best[i] = z
        if ranks:
            higher = np.flatnonzero(scores > scores[z])  # blocks ranked above it
            rank[i] = 1 + int(allowed_among(higher, ex, blocks, exclusion).sum())
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
    forward runs in (bf16 autocast where the run used it). The forward runs on the device the
    reader's weights are on (a GPU while it trains there); the predictions come back to the host."""
    import torch

    from realm_core.distributed import module_device

    if len(chosen) != len(examples) or (len(chosen) and int(np.min(chosen)) < 0):
        raise ValueError("read_blocks needs one block id >= 0 per example")
    reader.eval()
    device = module_device(reader)
    null_c, block_c, holds = [], [], []
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = list(examples[start:start + batch_size])
            batch = reader_batch(chunk, chosen[start:start + len(chunk), None], blocks, tokenizer, reader_length)
            placed = batch.to(device)
            with compute():
                log_probs = reader(placed.input_ids, placed.attention_mask, placed.masked_positions)  # (B, 2, M, V)
            predicted = log_probs.argmax(-1).cpu()  # (B, 2, M)
            right = (predicted == batch.targets[:, None]) | ~batch.target_mask[:, None]  # (B, 2, M)
            every = right.all(-1).numpy()  # (B, 2)
            null_c.append(every[:, 0])
            block_c.append(every[:, 1])
            holds.append(answer_retrieved(chunk, batch.input_ids.numpy(), batch.block_mask.numpy(), continuation))
            if progress is not None:
                progress(len(chunk))
    return Reading(_concat(null_c), _concat(block_c), _concat(holds))


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def evidence_loss(reader: Any, examples: Sequence[MaskedExample], evidence: np.ndarray, blocks: BlockTexts,
                  tokenizer: Any, reader_length: int, placement: Any) -> tuple[Any, Any]:
    """REALM's reader reading each example's `evidence` block alone (evidence: (B,) block ids, every
    one >= 0): (-log p(y|x,z) summed over each example's masked wordpieces, (B,) with gradient;
    every masked wordpiece predicted right, (B,) bool). The copy objective's loss, whether it
    trains a reader alone (`train_copy_reader`, the `reader_copy` stage)."""
    import torch

    batch = reader_batch(list(examples), evidence[:, None], blocks, tokenizer, reader_length).to(placement.device)
    with placement.compute():
        log_probs = reader(batch.input_ids[:, 1:], batch.attention_mask[:, 1:],
                           batch.masked_positions)[:, 0]  # (B, M, V): the evidence row only
    gold = log_probs.gather(-1, batch.targets[..., None]).squeeze(-1) * batch.target_mask  # (B, M)
    with torch.no_grad():
        right = ((log_probs.argmax(-1) == batch.targets) | ~batch.target_mask).all(-1)  # (B,)
    return -gold.sum(-1), right


@dataclass(frozen=True)
class CopyTraining:
    """How `train_copy_reader` trains: AdamW with linear warm-up and decay (BERT's schedule)."""

    steps: int
    batch_size: int
    learning_rate: float
    reader_length: int
    warmup_steps: int = 0
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    checkpoint_every: int = 50


def train_copy_reader(reader: Any, examples: Sequence[MaskedExample], evidence: np.ndarray, blocks: BlockTexts,
                      tokenizer: Any, config: CopyTraining, checkpoint_root: Any, placement: Any,
                      progress: Any, evaluate: Evaluate | None = None, eval_every: int = 0) -> list[dict[str, float]]:
    """Train `reader` in place to predict each example's masked span reading its `evidence` block
    alone (evidence: (E,) block ids, every one >= 0, e.g. `oracle_blocks`): the loss is
    -log p(y|x,z) of REALM's reader with z given. Batches and dropout are functions of
    (seed, step); resumes from the newest checkpoint under `checkpoint_root`. `evaluate`, given,
    measures the reader every `eval_every` steps and at the last (e.g. held-out `read_blocks`):
    its metrics join the curve's row of that step."""
    import torch

    from realm_core.pretrain.reader_training import train_reader_steps
    from realm_core.training import step_seed

    if len(evidence) != len(examples) or len(examples) < config.batch_size or int(np.min(evidence)) < 0:
        raise ValueError(f"train_copy_reader needs at least batch_size={config.batch_size} examples, "
                         "each with an evidence block")

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        picks = np.random.default_rng(step_seed(config.seed, step)).choice(len(examples), config.batch_size,
                                                                            replace=False)  # (B,)
        chunk = [examples[int(i)] for i in picks]
        torch.manual_seed(step_seed(config.seed, step, stream=1))  # dropout
        nll, right = evidence_loss(reader, chunk, evidence[picks], blocks, tokenizer, config.reader_length, placement)
        return nll.mean(), {"span_accuracy": float(right.float().mean())}

    return train_reader_steps(reader, config, step_loss, checkpoint_root, progress, placement,
                              "reader copy training (evidence blocks)", "lower the learning rate",
                              evaluate, eval_every)


def copy_trained(start: str, examples: Sequence[MaskedExample], evidence: np.ndarray, blocks: BlockTexts,
                 tokenizer: Any, config: CopyTraining, root: Any, identity: Sequence[Any], placement: Any,
                 progress: Any, dropout: float = 0.0, evaluate: Evaluate | None = None,
                 eval_every: int = 0) -> tuple[str, list[dict[str, float]]]:
    """The reader `start` copy-trained on `examples` with their `evidence` blocks
    (`train_copy_reader`), saved with its tokenizer as a reader directory pretraining can start
    from (`pretrain.reader_encoder`): root/<tag>/reader, the tag a hash of `identity` (what the
    caller's examples depend on; the training config and their count are added, and
    `eval_every` where `evaluate` measures the run as it trains), its checkpoints beside it, so
    a killed run resumes and a finished one is reused. Returns (the directory, the training
    curve)."""
    import hashlib
    import json
    from pathlib import Path

    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder

    evaluated = [{"eval_every": eval_every}] if evaluate is not None else []  # its curve differs
    tag = hashlib.sha256(json.dumps([*identity, config.__dict__, len(examples), *evaluated],
                                    sort_keys=True).encode()).hexdigest()[:12]
    checkpoints = Path(root) / tag
    saved = checkpoints / "reader"
    reader = KnowledgeAugmentedEncoder.from_pretrained(start, dropout=dropout, seed=config.seed)
    curve = train_copy_reader(reader, examples, evidence, blocks, tokenizer, config, checkpoints, placement, progress,
                              evaluate, eval_every)
    if not (saved / "config.json").is_file():
        reader.save_pretrained(saved)
        tokenizer.save_pretrained(str(saved))
    return str(saved), curve
