"""Embed blocks with the document (knowledge) encoder: `[CLS] title [SEP] body [SEP]` as the
chunker built them, under `torch.inference_mode`. Blocks are processed in shards of contiguous
block ids; inside a shard they are sorted by length and batched, so a batch pads only to its own
longest block, then put back in block-id order. Each shard is one `.npy` file (float32, or
float16 on request) of shape (n, D), row i being block `first_id + i`.

Shapes: B batch, T tokens, D embedding dim, N blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from realm_core.errors import ArtifactError
from realm_core.progress import NoProgress, Progress


def length_batches(lengths: list[int], batch_size: int) -> Iterator[list[int]]:
    """Indices grouped into batches of similar length (longest first: memory peaks early)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def pad_sequences(seqs: list[list[int]], pad_id: int) -> tuple[Any, Any]:
    """(N, T) input ids padded with `pad_id` to the longest sequence, and the (N, T) mask."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (N, T)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (N, T)
    for row, s in enumerate(seqs):
        ids[row, :len(s)] = torch.tensor(s)
        mask[row, :len(s)] = 1
    return ids, mask


def embed_token_ids(encoder: Any, ids: list[list[int]], pad_id: int, batch_size: int,
                    progress: Progress | None = None) -> np.ndarray:
    """(N, D) float32 embeddings of tokenised sequences, length-batched, in input order."""
    import torch

    out = np.zeros((len(ids), encoder.projection_dim), dtype=np.float32)  # (N, D)
    encoder.eval()
    with torch.inference_mode():
        for batch in length_batches([len(x) for x in ids], batch_size):
            input_ids, mask = pad_sequences([ids[i] for i in batch], pad_id)  # (B, T)
            out[batch] = encoder(input_ids, mask).float().numpy()  # (B, D)
            if progress is not None:
                progress.advance(len(batch))
    return out


def embed_texts(encoder: Any, tokenizer: Any, titles: list[str], bodies: list[str],
                max_length: int, batch_size: int, progress: Progress | None = None) -> np.ndarray:
    """(N, D) float32 embeddings of `[CLS] title [SEP] body [SEP]`, in input order."""
    enc = tokenizer(titles, bodies, truncation="only_second", max_length=max_length,
                    add_special_tokens=True, return_attention_mask=False)
    return embed_token_ids(encoder, enc["input_ids"], tokenizer.pad_token_id, batch_size, progress)


def embed_queries(encoder: Any, tokenizer: Any, queries: list[str], max_length: int,
                  batch_size: int) -> np.ndarray:
    """(Q, D) float32 embeddings of `[CLS] query [SEP]`, in input order."""
    enc = tokenizer(queries, truncation=True, max_length=max_length, return_attention_mask=False)
    return embed_token_ids(encoder, enc["input_ids"], tokenizer.pad_token_id, batch_size)


def embed_blocks(blocks: Any, encoder: Any, tokenizer: Any, directory: Path, *, max_length: int,
                 batch_size: int, shard_size: int, float16: bool = False,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Write `shard-NNNNN.npy` files for every block of a blocks artifact; return a summary."""
    progress = progress or NoProgress()
    progress.start("embed blocks", blocks.rows("blocks"), "blocks")
    directory.mkdir(parents=True, exist_ok=True)
    shards = []
    expected_id = 0
    for n, batch in enumerate(blocks.iter_batches("blocks", columns=["block_id", "title", "text"],
                                                  batch_size=shard_size)):
        block_ids = batch.column("block_id").to_numpy()
        if not np.array_equal(block_ids, np.arange(expected_id, expected_id + len(block_ids))):
            raise ArtifactError(f"{blocks.path}: block ids must be dense and in order "
                                f"(expected {expected_id}.. at part {n})")
        vectors = embed_texts(encoder, tokenizer, batch.column("title").to_pylist(),
                              batch.column("text").to_pylist(), max_length, batch_size, progress)
        if not np.isfinite(vectors).all():
            raise ArtifactError(f"encoder produced NaN/inf embeddings in shard {n}")
        name = f"shard-{n:05d}.npy"
        np.save(directory / name, vectors.astype(np.float16 if float16 else np.float32),
                allow_pickle=False)
        shards.append({"file": name, "first_block_id": int(expected_id), "rows": len(block_ids)})
        expected_id += len(block_ids)
    progress.finish()
    return {"shards": shards, "rows": expected_id, "dim": int(encoder.projection_dim),
            "dtype": "float16" if float16 else "float32"}


def load_embeddings(directory: Path, summary: dict[str, Any], n_blocks: int) -> np.ndarray:
    """(N, D) float32 embeddings; refuses a row count or dimension that disagrees with the blocks."""
    parts = []
    for shard in summary["shards"]:
        path = directory / shard["file"]
        try:
            part = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ArtifactError(f"{path}: unreadable embeddings shard ({e})") from None
        if part.shape != (shard["rows"], summary["dim"]):
            raise ArtifactError(f"{path}: expected shape ({shard['rows']}, {summary['dim']}), "
                                f"found {part.shape}")
        parts.append(part.astype(np.float32))
    vectors = np.concatenate(parts) if parts else np.zeros((0, summary["dim"]), np.float32)
    if len(vectors) != n_blocks:
        raise ArtifactError(f"{directory}: {len(vectors)} embeddings for {n_blocks} blocks")
    if not np.isfinite(vectors).all():
        raise ArtifactError(f"{directory}: embeddings hold NaN or inf")
    return vectors
