"""Embed blocks with the document (knowledge) encoder: `[CLS] title [SEP] body [SEP]` as the
chunker built them, under `torch.inference_mode`. Blocks are processed in shards of contiguous
block ids; inside a shard they are sorted by length and batched, so a batch pads only to its own
longest block, then put back in block-id order. Each shard is one `.npy` file (float32, or
float16 on request) of shape (n, D), row i being block `first_id + i`.

Shards are independent units of work (`ShardJob`, picklable): with `workers > 1` they are
embedded by local worker processes, each loading the encoder from its recipe and using its share
of the cores (`torch` threads = cores // workers), and with `map_shards` by whatever runs them,
e.g. Dask workers through Prefect's task runner (`flows/fanout.py`); the files and their order
are the same as with one process.

Shapes: B batch, T tokens, D embedding dim, N blocks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, cast

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
    the encoder's device (bf16 autocast with `precision="bf16"`, or `"auto"` where the device
    computes bf16 natively; int8 dynamic quantization with `"int8"`, on a CPU)."""
    import torch

    from realm_core.distributed import Placement, Precision, module_device

    out = np.zeros((len(ids), encoder.projection_dim), dtype=np.float32)  # (N, D)
    place = Placement(module_device(encoder), cast(Precision, precision))
    device = place.device
    encoder = place.for_inference(encoder)
    with torch.inference_mode(), place.compute():
        for batch in length_batches([len(x) for x in ids], batch_size):
            input_ids, mask = pad_sequences([ids[i] for i in batch], pad_id)  # (B, T)
            out[batch] = encoder(input_ids.to(device), mask.to(device)).float().cpu().numpy()  # (B, D)
            if progress is not None:
                progress.advance(len(batch))
    return out


def tokenize_blocks(tokenizer: Any, titles: list[str], bodies: list[str], max_length: int) -> list[list[int]]:
    """Wordpiece ids of `[CLS] title [SEP] body [SEP]`, the body cut to fit `max_length`."""
    enc = tokenizer(titles, bodies, truncation="only_second", max_length=max_length, add_special_tokens=True,
                    return_attention_mask=False, return_token_type_ids=False)
    ids: list[list[int]] = enc["input_ids"]
    return ids


PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"  # read by the Rust tokeniser at each batch call


@contextmanager
def tokenizer_parallelism(enabled: bool | None) -> Iterator[None]:
    """The fast tokeniser's own thread pool on (True) or off (False) for the calls inside, the
    environment put back after; None leaves it as it is. The Makefile and tests turn it off
    (a forked process that inherits a used pool disables it with a warning); on a GPU machine
    the embedding stage turns it on, as one tokeniser thread cannot keep the encoder fed."""
    if enabled is None:
        yield
        return
    before = os.environ.get(PARALLELISM_ENV)
    os.environ[PARALLELISM_ENV] = "true" if enabled else "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PARALLELISM_ENV, None)
        else:
            os.environ[PARALLELISM_ENV] = before


def tokenizer_parallel_for(requested: str, device: Any) -> bool | None:
    """`EmbedConfig.tokenizer_parallel` resolved for a device: "auto" is on for an accelerator
    and left as the environment says on a CPU (where the encoder, not the tokeniser, is slow)."""
    if requested == "auto":
        return None if str(device) == "cpu" else True
    return requested == "on"


def embed_texts(encoder: Any, tokenizer: Any, titles: list[str], bodies: list[str],
                max_length: int, batch_size: int, progress: Progress | None = None,
                precision: str = "fp32", tokenizer_parallel: bool | None = None) -> np.ndarray:
    """(N, D) float32 embeddings of `[CLS] title [SEP] body [SEP]`, in input order: all texts
    tokenised at once (the tokeniser's own parallelism as `tokenizer_parallel` says, see
    `tokenizer_parallelism`), then length-sorted, batched and encoded."""
    with tokenizer_parallelism(tokenizer_parallel):
        ids = tokenize_blocks(tokenizer, titles, bodies, max_length)
    return embed_token_ids(encoder, ids, tokenizer.pad_token_id, batch_size, progress, precision)


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
        from realm_core.bert import load_tokenizer
        from realm_core.retrieval.encoders import RetrieverEncoder

        encoder = RetrieverEncoder.from_pretrained(self.source, self.projection_dim,
                                                   self.pooling, self.seed, self.normalize)  # type: ignore[arg-type]
        return encoder, load_tokenizer(self.source)


@dataclass(frozen=True)
class EmbedShard:
    """Blocks [first_block_id, first_block_id + rows), embedded into one `.npy` file."""

    number: int
    first_block_id: int
    rows: int

    @property
    def file(self) -> str:
        return f"shard-{self.number:05d}.npy"

    def summary(self) -> dict[str, Any]:
        return {"file": self.file, "first_block_id": self.first_block_id, "rows": self.rows}


def plan_shards(n_blocks: int, shard_size: int) -> list[EmbedShard]:
    """Contiguous block-id ranges of `shard_size` (the last one shorter)."""
    return [EmbedShard(n, first, min(shard_size, n_blocks - first))
            for n, first in enumerate(range(0, n_blocks, shard_size))]


@dataclass(frozen=True)
class ShardJob:
    """Everything a process needs to embed one shard: picklable, so a process pool or a Dask
    worker runs it. The blocks are read from the artifact store (a shared filesystem or an
    fsspec URL); the shard file goes to `directory`, which the workers must be able to write."""

    store_url: str
    blocks_path: str
    shard: EmbedShard
    directory: str
    recipe: EncoderRecipe
    max_length: int
    batch_size: int
    float16: bool = False
    precision: str = "fp32"
    device: str = "cpu"
    threads: int | None = None
    tokenizer_parallel: str = "auto"


def embed_shard_rows(encoder: Any, tokenizer: Any, blocks: Any, shard: EmbedShard, directory: Path, *,
                     max_length: int, batch_size: int, float16: bool = False, precision: str = "fp32",
                     progress: Progress | None = None, tokenizer_parallel: str = "auto") -> dict[str, Any]:
    """Embed one shard's blocks with a loaded encoder and write its file; its summary."""
    from realm_core.distributed import module_device

    batch = blocks.read_rows("blocks", shard.first_block_id, shard.first_block_id + shard.rows,
                             ["block_id", "title", "text"])
    ids = batch.column("block_id").to_numpy()
    if not np.array_equal(ids, np.arange(shard.first_block_id, shard.first_block_id + shard.rows)):
        raise ArtifactError(f"{blocks.path}: block ids must be dense and in order "
                            f"(expected {shard.first_block_id}.. in shard {shard.number})")
    parallel = tokenizer_parallel_for(tokenizer_parallel, module_device(encoder))
    vectors = embed_texts(encoder, tokenizer, batch.column("title").to_pylist(), batch.column("text").to_pylist(),
                          max_length, batch_size, progress, precision, parallel)
    if not np.isfinite(vectors).all():
        raise ArtifactError(f"encoder produced NaN/inf embeddings in {shard.file}")
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / shard.file, vectors.astype(np.float16 if float16 else np.float32), allow_pickle=False)
    return shard.summary()


_loaded: dict[tuple[EncoderRecipe, str], tuple[Any, Any]] = {}


def embed_shard(job: ShardJob) -> dict[str, Any]:
    """Embed one shard in whatever process runs this (the encoder is loaded once per process)."""
    import torch

    from realm_core.store.artifacts import ArtifactStore

    if job.threads is not None:
        torch.set_num_threads(job.threads)
    if (job.recipe, job.device) not in _loaded:
        from realm_core.distributed import resolve_device

        encoder, tokenizer = job.recipe.load()
        _loaded[(job.recipe, job.device)] = (encoder.to(resolve_device(job.device)), tokenizer)
    encoder, tokenizer = _loaded[(job.recipe, job.device)]
    blocks = ArtifactStore(job.store_url).open(job.blocks_path, kind="blocks")
    return embed_shard_rows(encoder, tokenizer, blocks, job.shard, Path(job.directory), max_length=job.max_length,
                            batch_size=job.batch_size, float16=job.float16, precision=job.precision,
                            tokenizer_parallel=job.tokenizer_parallel)


ShardMap = Callable[[list[ShardJob]], list[dict[str, Any]]]


def embed_blocks(blocks: Any, encoder: Any, tokenizer: Any, directory: Path, *, max_length: int,
                 batch_size: int, shard_size: int, float16: bool = False,
                 progress: Progress | None = None, workers: int = 1,
                 recipe: EncoderRecipe | None = None, precision: str = "fp32",
                 map_shards: ShardMap | None = None, store_url: str | None = None,
                 tokenizer_parallel: str = "auto") -> dict[str, Any]:
    """Write `shard-NNNNN.npy` files for every block of a blocks artifact; return a summary.

    The shards are embedded one after another by `encoder` on its device; or, given the
    encoder's `recipe`, in `workers` local processes (cores/workers threads each), or by
    `map_shards`, which runs `embed_shard` over the jobs wherever it likes (a Dask cluster
    through Prefect's task runner). Every way writes the same files."""
    progress = progress or NoProgress()
    total = blocks.rows("blocks")
    progress.start("embed blocks", total, "blocks")
    directory.mkdir(parents=True, exist_ok=True)
    plan = plan_shards(total, shard_size)
    fan_out = recipe is not None and (map_shards is not None or workers > 1)
    if fan_out:
        assert recipe is not None
        threads = max(1, (os.cpu_count() or 1) // workers) if map_shards is None else None
        jobs = [ShardJob(store_url or str(Path(blocks.path).parents[1]), blocks.path, shard, str(directory), recipe,
                         max_length, batch_size, float16, precision,
                         device="auto" if map_shards is not None else "cpu", threads=threads,
                         tokenizer_parallel=tokenizer_parallel) for shard in plan]
        if map_shards is not None:
            shards = map_shards(jobs)
        else:
            shards = []
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
                for summary in pool.map(embed_shard, jobs):
                    shards.append(summary)
                    progress.advance(summary["rows"])
    else:
        shards = [embed_shard_rows(encoder, tokenizer, blocks, shard, directory, max_length=max_length,
                                   batch_size=batch_size, float16=float16, precision=precision,
                                   progress=progress, tokenizer_parallel=tokenizer_parallel) for shard in plan]
    progress.finish()
    if [s["file"] for s in shards] != [s.file for s in plan]:
        raise ArtifactError(f"{directory}: shards came back as {[s['file'] for s in shards][:3]}..., "
                            f"expected {[s.file for s in plan][:3]}...")
    rows = sum(s["rows"] for s in shards)
    return {"shards": shards, "rows": rows, "dim": int(encoder.projection_dim),
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
