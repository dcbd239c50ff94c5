"""Embed blocks with the document (knowledge) encoder: `[CLS] title [SEP] body [SEP]` as the
chunker built them, under `torch.inference_mode`. Blocks are processed in shards of contiguous
block ids; inside a shard they are sorted by length and batched, so a batch pads only to its own
longest block, then put back in block-id order. Each shard is one `.npy` file (float32, or
float16 on request) of shape (n, D), row i being block `first_id + i`.

Shards are independent, so with `workers > 1` they are embedded in parallel by worker processes,
each loading the encoder from its recipe and using its share of the cores (`torch` threads =
cores // workers); the files and their order are the same as with one process.

Shapes: B batch, T tokens, D embedding dim, N blocks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
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
                    progress: Progress | None = None, precision: str = "fp32") -> np.ndarray:
    """(N, D) float32 embeddings of tokenised sequences, length-batched, in input order, on
    the encoder's device (bf16 autocast with `precision="bf16"`)."""
    import contextlib

    import torch

    out = np.zeros((len(ids), encoder.projection_dim), dtype=np.float32)  # (N, D)
    device = next(encoder.parameters()).device
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    encoder.eval()
    with torch.inference_mode(), autocast:
        for batch in length_batches([len(x) for x in ids], batch_size):
            input_ids, mask = pad_sequences([ids[i] for i in batch], pad_id)  # (B, T)
            out[batch] = encoder(input_ids.to(device), mask.to(device)).float().cpu().numpy()  # (B, D)
            if progress is not None:
                progress.advance(len(batch))
    return out


def embed_texts(encoder: Any, tokenizer: Any, titles: list[str], bodies: list[str],
                max_length: int, batch_size: int, progress: Progress | None = None,
                precision: str = "fp32") -> np.ndarray:
    """(N, D) float32 embeddings of `[CLS] title [SEP] body [SEP]`, in input order."""
    enc = tokenizer(titles, bodies, truncation="only_second", max_length=max_length,
                    add_special_tokens=True, return_attention_mask=False)
    return embed_token_ids(encoder, enc["input_ids"], tokenizer.pad_token_id, batch_size, progress,
                           precision)


def embed_queries(encoder: Any, tokenizer: Any, queries: list[str], max_length: int,
                  batch_size: int) -> np.ndarray:
    """(Q, D) float32 embeddings of `[CLS] query [SEP]`, in input order."""
    enc = tokenizer(queries, truncation=True, max_length=max_length, return_attention_mask=False)
    return embed_token_ids(encoder, enc["input_ids"], tokenizer.pad_token_id, batch_size)


@dataclass(frozen=True)
class EncoderRecipe:
    """How a worker process loads the document encoder and its tokenizer (picklable)."""

    source: str
    projection_dim: int = 128
    pooling: str = "cls"
    seed: int = 0
    normalize: bool = False

    def load(self) -> tuple[Any, Any]:
        from realm_core.encoders import load_tokenizer
        from realm_core.retrieval.encoders import RetrieverEncoder

        encoder = RetrieverEncoder.from_pretrained(self.source, self.projection_dim,
                                                   self.pooling, self.seed, self.normalize)  # type: ignore[arg-type]
        return encoder, load_tokenizer(self.source)


_worker: dict[str, Any] = {}


def _start_worker(recipe: EncoderRecipe, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    _worker["encoder"], _worker["tokenizer"] = recipe.load()


def _embed_shard(titles: list[str], bodies: list[str], path: Path, max_length: int,
                 batch_size: int, float16: bool, precision: str) -> bool:
    """In a worker: embed one shard and write its file; False if it holds NaN/inf."""
    vectors = embed_texts(_worker["encoder"], _worker["tokenizer"], titles, bodies, max_length, batch_size,
                          precision=precision)
    if not np.isfinite(vectors).all():
        return False
    np.save(path, vectors.astype(np.float16 if float16 else np.float32), allow_pickle=False)
    return True


def _shard_texts(blocks: Any, shard_size: int) -> Iterator[tuple[int, list[str], list[str]]]:
    """(first block id, titles, bodies) per shard; block ids must be dense and in order."""
    expected_id = 0
    for n, batch in enumerate(blocks.iter_batches("blocks", columns=["block_id", "title", "text"],
                                                  batch_size=shard_size)):
        block_ids = batch.column("block_id").to_numpy()
        if not np.array_equal(block_ids, np.arange(expected_id, expected_id + len(block_ids))):
            raise ArtifactError(f"{blocks.path}: block ids must be dense and in order "
                                f"(expected {expected_id}.. at part {n})")
        yield expected_id, batch.column("title").to_pylist(), batch.column("text").to_pylist()
        expected_id += len(block_ids)


def embed_blocks(blocks: Any, encoder: Any, tokenizer: Any, directory: Path, *, max_length: int,
                 batch_size: int, shard_size: int, float16: bool = False,
                 progress: Progress | None = None, workers: int = 1,
                 recipe: EncoderRecipe | None = None, precision: str = "fp32") -> dict[str, Any]:
    """Write `shard-NNNNN.npy` files for every block of a blocks artifact; return a summary.

    `workers > 1` (with the encoder's `recipe`) embeds shards in parallel CPU processes; progress
    then advances a shard at a time. Otherwise the shards are embedded on the encoder's device."""
    progress = progress or NoProgress()
    progress.start("embed blocks", blocks.rows("blocks"), "blocks")
    directory.mkdir(parents=True, exist_ok=True)
    dtype = np.float16 if float16 else np.float32
    shards: list[dict[str, Any]] = []
    if workers > 1 and recipe is not None:
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_start_worker,
                                 initargs=(recipe, threads)) as pool:
            pending: list[tuple[dict[str, Any], Future[bool]]] = []
            for n, (first, titles, bodies) in enumerate(_shard_texts(blocks, shard_size)):
                name = f"shard-{n:05d}.npy"
                shard = {"file": name, "first_block_id": first, "rows": len(titles)}
                pending.append((shard, pool.submit(_embed_shard, titles, bodies, directory / name,
                                                   max_length, batch_size, float16, precision)))
                while len(pending) > workers or (pending and pending[0][1].done()):
                    shards.append(_finished(*pending.pop(0), progress))
            while pending:
                shards.append(_finished(*pending.pop(0), progress))
    else:
        for n, (first, titles, bodies) in enumerate(_shard_texts(blocks, shard_size)):
            vectors = embed_texts(encoder, tokenizer, titles, bodies, max_length, batch_size, progress,
                                  precision)
            if not np.isfinite(vectors).all():
                raise ArtifactError(f"encoder produced NaN/inf embeddings in shard {n}")
            name = f"shard-{n:05d}.npy"
            np.save(directory / name, vectors.astype(dtype), allow_pickle=False)
            shard = {"file": name, "first_block_id": first, "rows": len(titles)}
            shards.append(shard)
    progress.finish()
    rows = sum(s["rows"] for s in shards)
    return {"shards": shards, "rows": rows, "dim": int(encoder.projection_dim),
            "dtype": "float16" if float16 else "float32"}


def _finished(shard: dict[str, Any], future: Future[bool], progress: Progress) -> dict[str, Any]:
    if not future.result():
        raise ArtifactError(f"encoder produced NaN/inf embeddings in {shard['file']}")
    progress.advance(shard["rows"])
    return shard


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
