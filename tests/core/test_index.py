from pathlib import Path

import numpy as np
import pytest

from realm_core.errors import ArtifactError, RealmError
from realm_core.retrieval.index import MipsIndex


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_flat_search_maps_rows_to_block_ids_exactly() -> None:
    vectors = np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)
    index = MipsIndex.build(2)
    index.add(vectors, np.array([10, 20, 30]))
    scores, ids = index.search(np.array([[1, 0], [0, 1]], dtype=np.float32), k=2)
    assert ids.tolist() == [[10, 30], [20, 30]]
    np.testing.assert_allclose(scores, [[1.0, 0.6], [1.0, 0.8]], rtol=1e-6)
    _, all_ids = index.search(np.array([[1, 0]], dtype=np.float32), k=10)  # k capped at N
    assert all_ids.tolist() == [[10, 30, 20]]


def test_matches_brute_force_and_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    corpus, queries = unit(rng.normal(size=(500, 16))), unit(rng.normal(size=(20, 16)))
    index = MipsIndex.build(16)
    index.add(corpus[:300], np.arange(300) + 1000)
    index.add(corpus[300:], np.arange(300, 500) + 1000)
    _, ids = index.search(queries, k=5)
    expected = np.argsort(-(queries @ corpus.T), axis=1)[:, :5] + 1000
    assert (ids == expected).all()
    index.save(tmp_path / "ix")
    again = MipsIndex.load(tmp_path / "ix")
    assert (again.search(queries, k=5)[1] == expected).all()


def test_ivf_needs_training_vectors() -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(RealmError, match="must be trained"):
        MipsIndex.build(8, "IVF4,Flat")
    index = MipsIndex.build(8, "IVF4,Flat", train_vectors=unit(rng.normal(size=(200, 8))), ivf_nprobe=4)
    index.add(unit(rng.normal(size=(50, 8))), np.arange(50))
    assert len(index) == 50


def test_bad_vectors_and_files(tmp_path: Path) -> None:
    index = MipsIndex.build(4)
    with pytest.raises(RealmError, match=r"expected shape \(n, 4\)"):
        index.add(np.zeros((2, 3), dtype=np.float32), np.arange(2))
    bad = np.ones((3, 4), dtype=np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(RealmError, match=r"1 vectors hold NaN or inf \(rows \[1\]"):
        index.add(bad, np.arange(3))
    with pytest.raises(RealmError, match="3 vectors but 2 block ids"):
        index.add(np.ones((3, 4), dtype=np.float32), np.arange(2))
    assert len(index) == 0
    with pytest.raises(RealmError, match="queries"):
        index.search(np.ones((1, 5), dtype=np.float32), 1)
    with pytest.raises(RealmError, match="not valid"):
        MipsIndex.build(4, "NoSuchIndex")
    index.add(np.eye(4, dtype=np.float32), np.arange(4))
    index.save(tmp_path / "ix")
    np.save(tmp_path / "ix" / "block_ids.npy", np.arange(3), allow_pickle=False)
    with pytest.raises(ArtifactError, match="expected 4 int64 block ids"):
        MipsIndex.load(tmp_path / "ix")
    (tmp_path / "ix" / "index.faiss").write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match="not a readable faiss index"):
        MipsIndex.load(tmp_path / "ix")
    with pytest.raises(ArtifactError, match="missing"):
        MipsIndex.load(tmp_path / "nothing")
