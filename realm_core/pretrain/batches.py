"""From masked examples to reader batches: retrieve from the (stale) MIPS index, drop trivial
retrievals, add the null block, and lay out `[CLS] x [SEP] z_title [SEP] z_body [SEP]`.

Slot 0 of every example is the null block (REALM §3.4: an empty block, always a candidate, so
the reader can fall back on its own knowledge); slots 1..K-1 are the top retrieved blocks in
index order. A slot with no block (too few candidates left after the exclusions) is masked.

Shapes: B batch, K blocks per example (null included), T tokens, M masked positions, D dim,
N corpus blocks, U distinct blocks of a step (null included).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from realm_core.retrieval.embed import pad_sequences
from realm_core.spans.masking import MaskedExample

NULL_BLOCK = -1


@dataclass
class BlockTexts:
    """The corpus as the pretraining loop reads it: Arrow arrays indexed by block id."""

    titles: pa.Array
    texts: pa.Array
    doc_ids: np.ndarray      # (N,) object
    title_keys: np.ndarray   # (N,) object, lowercased titles: one article across corpora
    # block id -> (title ids, body ids): a block is tokenised once, not at every retrieval
    pieces: OrderedDict[int, tuple[list[int], list[int]]] = field(default_factory=OrderedDict)
    max_cached: int = 200_000

    @classmethod
    def from_table(cls, table: pa.Table) -> BlockTexts:
        titles = table.column("title").combine_chunks()
        return cls(titles, table.column("text").combine_chunks(),
                   np.asarray(table.column("doc_id").to_pylist(), dtype=object),
                   np.asarray([t.lower() for t in titles.to_pylist()], dtype=object))

    def __len__(self) -> int:
        return len(self.titles)


def retrieve_candidates(scores_ids: np.ndarray, examples: list[MaskedExample], blocks: BlockTexts,
                        n_retrieved: int, exclusion: str = "block") -> np.ndarray:
    """(B, K-1) block ids from the index's ranked ids (B, R), -1 where none is left.

    REALM §3.4: the block the masked sentence comes from is a trivial retrieval (the answer is
    right there, unmasked) and is dropped. `block` (the paper's rule) drops it and the copies of
    its article held by other corpora (same title, another document), whose blocks may repeat
    the sentence; the article's other blocks stay retrievable. `article` drops every block of
    the article (doc id or title): stricter, and on a small corpus it leaves little to learn."""
    out = np.full((len(examples), n_retrieved), NULL_BLOCK, dtype=np.int64)
    for b, (ex, ranked) in enumerate(zip(examples, scores_ids, strict=True)):
        own_doc, own_title = blocks.doc_ids[ex.block_id], blocks.title_keys[ex.block_id]
        if exclusion == "article":
            kept = [z for z in ranked
                    if z >= 0 and blocks.doc_ids[z] != own_doc and blocks.title_keys[z] != own_title]
        else:
            kept = [z for z in ranked if z >= 0 and z != ex.block_id
                    and (blocks.doc_ids[z] == own_doc or blocks.title_keys[z] != own_title)]
        out[b, :min(n_retrieved, len(kept))] = kept[:n_retrieved]
    return out


@dataclass
class ReaderBatch:
    input_ids: torch.Tensor         # (B, K, T)
    attention_mask: torch.Tensor    # (B, K, T)
    masked_positions: torch.Tensor  # (B, M)
    targets: torch.Tensor           # (B, M)
    target_mask: torch.Tensor       # (B, M)
    block_mask: torch.Tensor        # (B, K) True where the slot holds a block (null: always)
    block_ids: np.ndarray           # (B, K) with -1 for the null block and for empty slots

    def to(self, device: torch.device) -> ReaderBatch:
        """The tensors on `device` (the block ids stay a NumPy array)."""
        return ReaderBatch(self.input_ids.to(device), self.attention_mask.to(device),
                           self.masked_positions.to(device), self.targets.to(device),
                           self.target_mask.to(device), self.block_mask.to(device), self.block_ids)


def reader_batch(examples: list[MaskedExample], candidates: np.ndarray, blocks: BlockTexts,
                 tokenizer: Any, reader_length: int) -> ReaderBatch:
    """Tensors for the knowledge-augmented encoder; candidates (B, K-1) from retrieve_candidates."""
    b, k = len(examples), candidates.shape[1] + 1
    block_ids = np.concatenate([np.full((b, 1), NULL_BLOCK), candidates], axis=1)  # (B, K)
    wanted = sorted({int(z) for z in candidates.ravel() if z >= 0})
    rows = {z: i for i, z in enumerate(wanted)}
    titles, bodies = block_wordpieces(wanted, blocks, tokenizer)
    sep = tokenizer.sep_token_id
    seqs: list[list[int]] = []
    for ex, row in zip(examples, block_ids, strict=True):
        for z in row:
            # [CLS] x [SEP] + title [SEP] body [SEP], the body cut to fit reader_length
            seq = list(ex.input_ids)
            if z >= 0:
                i = rows[int(z)]
                room = reader_length - len(seq) - 2
                title = titles[i][:max(room, 0)]
                seq += title + [sep] + bodies[i][:max(room - len(title), 0)] + [sep]
            seqs.append(seq[:reader_length - 1] + [sep] if len(seq) > reader_length else seq)
    ids, mask = pad_sequences(seqs, tokenizer.pad_token_id)  # (B*K, T)
    width = ids.size(1)
    m = max(len(ex.masked_positions) for ex in examples)
    positions = torch.zeros((b, m), dtype=torch.long)
    targets = torch.zeros((b, m), dtype=torch.long)
    target_mask = torch.zeros((b, m), dtype=torch.bool)
    for i, ex in enumerate(examples):
        n = len(ex.masked_positions)
        positions[i, :n] = torch.tensor(ex.masked_positions)
        targets[i, :n] = torch.tensor(ex.targets)
        target_mask[i, :n] = True
    block_mask = torch.from_numpy(block_ids >= 0)
    block_mask[:, 0] = True
    return ReaderBatch(ids.view(b, k, width), mask.view(b, k, width), positions, targets, target_mask,
                       block_mask, block_ids)


def block_wordpieces(block_ids: list[int], blocks: BlockTexts, tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
    """Wordpiece ids of each block's title and body, without special tokens (least recently
    used blocks beyond `blocks.max_cached` are tokenised again when next retrieved)."""
    missing = sorted({z for z in block_ids if z not in blocks.pieces})
    if missing:
        titles = tokenizer([blocks.titles[z].as_py() for z in missing], add_special_tokens=False,
                           return_attention_mask=False)["input_ids"]
        bodies = tokenizer([blocks.texts[z].as_py() for z in missing], add_special_tokens=False,
                           return_attention_mask=False)["input_ids"]
        for z, t, b in zip(missing, titles, bodies, strict=True):
            blocks.pieces[z] = (t, b)
    out = []
    for z in block_ids:
        blocks.pieces.move_to_end(z)
        out.append(blocks.pieces[z])
    while len(blocks.pieces) > blocks.max_cached:
        blocks.pieces.popitem(last=False)
    return [t for t, _ in out], [b for _, b in out]


def doc_encoder_inputs(block_ids: np.ndarray, blocks: BlockTexts, tokenizer: Any,
                       max_length: int) -> dict[str, torch.Tensor]:
    """`[CLS] title [SEP] body [SEP]` (body cut to max_length) for each of (U,) block ids, as
    padded (U, T) tensors; the null block (-1) is the empty block `[CLS] [SEP] [SEP]`."""
    real = [int(z) for z in block_ids if z >= 0]
    titles, bodies = block_wordpieces(real, blocks, tokenizer)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    seqs, i = [], 0
    for z in block_ids:
        if z < 0:
            seqs.append([cls, sep, sep])
            continue
        title = titles[i][:max_length - 3]
        seqs.append([cls, *title, sep, *bodies[i][:max_length - 3 - len(title)], sep])
        i += 1
    ids, mask = pad_sequences(seqs, tokenizer.pad_token_id)  # (U, T)
    return {"input_ids": ids, "attention_mask": mask}
