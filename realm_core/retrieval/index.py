"""The MIPS index over block embeddings (REALM §3.1: p(z|x) ∝ exp(Embed_input(x) · Embed_doc(z))).

A small interface, as in DPR: build, add, search, save, load, with an explicit block-id map
(row i of the faiss index is block `block_ids[i]`). Exact `IndexFlatIP` by default; IVF or HNSW
through a faiss factory string for large corpora. Saved as faiss's own file plus `.npy` ids read
with `allow_pickle=False`: nothing a user hands us is unpickled.

Shapes: N corpus blocks, Q queries, D embedding dim, K results per query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from realm_core.errors import ArtifactError, RealmError

INDEX_FILE = "index.faiss"
IDS_FILE = "block_ids.npy"


def _check_vectors(vectors: np.ndarray, dim: int, what: str) -> np.ndarray:
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise RealmError(f"{what}: expected shape (n, {dim}), got {tuple(vectors.shape)}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise RealmError(f"{what}: {int(bad.sum())} vectors hold NaN or inf (rows {rows}...)")
    return vectors


class MipsIndex:
    """Maximum inner product search over block embeddings with an explicit block-id map."""

    def __init__(self, index: Any, block_ids: np.ndarray, factory: str) -> None:
        self.index = index
        self.block_ids = block_ids  # (N,) int64
        self.factory = factory

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def build(cls, dim: int, factory: str = "Flat", train_vectors: np.ndarray | None = None,
              hnsw_ef_search: int = 128, ivf_nprobe: int = 32) -> MipsIndex:
        """An empty index; IVF factories are trained on `train_vectors` (a sample of the corpus)."""
        import faiss

        try:
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise RealmError(f"faiss factory {factory!r} is not valid for dim {dim}: {e}") from None
        if not index.is_trained:
            if train_vectors is None:
                raise RealmError(f"faiss index {factory!r} must be trained: pass train_vectors")
            index.train(_check_vectors(train_vectors, dim, "training vectors"))
        if hasattr(index, "hnsw"):
            index.hnsw.efSearch = hnsw_ef_search
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = ivf_nprobe
        return cls(index, np.zeros(0, dtype=np.int64), factory)

    def add(self, vectors: np.ndarray, block_ids: np.ndarray) -> None:
        vectors = _check_vectors(vectors, self.dim, "embeddings")  # (n, D)
        ids = np.asarray(block_ids, dtype=np.int64)
        if ids.shape != (vectors.shape[0],):
            raise RealmError(f"embeddings: {vectors.shape[0]} vectors but {ids.shape[0]} block ids")
        self.index.add(vectors)
        self.block_ids = np.concatenate([self.block_ids, ids])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores (Q, K) float32, block ids (Q, K) int64), best first; -1 pads short results."""
        queries = _check_vectors(queries, self.dim, "queries")  # (Q, D)
        k = min(k, len(self))
        scores, rows = self.index.search(queries, k)  # (Q, K), (Q, K) rows into block_ids
        ids = np.where(rows >= 0, self.block_ids[np.clip(rows, 0, None)], -1)
        return scores, ids

    def reconstruct(self, block_ids: np.ndarray) -> np.ndarray:
        """(n, D) stored vectors of the given block ids (-1: a zero vector)."""
        import faiss

        if not hasattr(self, "_row_of"):
            self._row_of = {int(b): r for r, b in enumerate(self.block_ids)}
            ivf = faiss.try_extract_index_ivf(self.index)
            if ivf is not None:
                ivf.make_direct_map()
        flat = np.asarray(block_ids, dtype=np.int64).ravel()
        out = np.zeros((len(flat), self.dim), dtype=np.float32)
        for i, b in enumerate(flat):
            if b >= 0:
                out[i] = self.index.reconstruct(self._row_of[int(b)])
        return out.reshape(*np.shape(block_ids), self.dim)

    def save(self, directory: Path) -> None:
        import faiss

        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(directory / INDEX_FILE))
        np.save(directory / IDS_FILE, self.block_ids, allow_pickle=False)

    @classmethod
    def load(cls, directory: Path, factory: str = "unknown") -> MipsIndex:
        import faiss

        index_path, ids_path = directory / INDEX_FILE, directory / IDS_FILE
        for p in (index_path, ids_path):
            if not p.is_file():
                raise ArtifactError(f"{p}: missing; expected a faiss index and its block-id map")
        try:
            index = faiss.read_index(str(index_path))
        except RuntimeError as e:
            raise ArtifactError(f"{index_path}: not a readable faiss index ({e})") from None
        try:
            ids = np.load(ids_path, allow_pickle=False)
        except ValueError as e:
            raise ArtifactError(f"{ids_path}: not an int64 .npy block-id map ({e})") from None
        if ids.dtype != np.int64 or ids.shape != (index.ntotal,):
            raise ArtifactError(f"{ids_path}: expected {index.ntotal} int64 block ids to match "
                                f"{index_path}, found {ids.shape} {ids.dtype}")
        return cls(index, ids, factory)
