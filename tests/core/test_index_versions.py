import threading
from pathlib import Path

import numpy as np
import pytest

from realm_core.errors import ArtifactError, RealmError
from realm_core.retrieval.index import MipsIndex
from realm_core.retrieval.versions import (
    current_step,
    load_index,
    publish_index,
    set_current,
    versions,
)
from realm_core.store.artifacts import ArtifactStore


def make_index(shift: float) -> MipsIndex:
    index = MipsIndex.build(2)
    index.add(np.array([[1, shift], [shift, 1]], dtype=np.float32), np.array([0, 1]))
    return index


def publish(store: ArtifactStore, step: int) -> None:
    publish_index(store, step, make_index(step / 1000), encoder_checkpoint=f"ckpt-{step}",
                  embeddings_hash=f"e{step}", blocks_hash="b")


def test_versions_switch_atomically_and_only_forward(store: ArtifactStore) -> None:
    with pytest.raises(RealmError, match="no current index"):
        load_index(store)
    publish(store, 500)
    assert current_step(store) is None  # published is not current
    assert set_current(store, 500) is True
    publish(store, 1000)
    assert set_current(store, 1000) is True
    assert set_current(store, 500) is False  # a late refresh never goes back
    index, art = load_index(store)
    assert art.manifest["step"] == 1000 and art.manifest["encoder_checkpoint"] == "ckpt-1000"
    assert len(index) == 2 and versions(store) == [500, 1000]
    assert load_index(store, 500)[1].manifest["step"] == 500
    with pytest.raises(RealmError, match=r"version 7 not found; available: \[500, 1000\]"):
        load_index(store, 7)
    with pytest.raises(RealmError, match="exists already"):
        publish(store, 500)
    with pytest.raises(RealmError, match="not published"):
        set_current(store, 1500)


def test_concurrent_switches_end_on_the_newest(store: ArtifactStore) -> None:
    steps = list(range(100, 1700, 100))
    for s in steps:
        publish(store, s)
    seen: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            if current_step(store) is not None:
                seen.append(load_index(store)[1].manifest["step"])

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=set_current, args=(store, s)) for s in reversed(steps)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    r.join()
    assert current_step(store) == 1600
    assert all(s in steps for s in seen)


def test_corrupt_pointer(store: ArtifactStore) -> None:
    publish(store, 1)
    set_current(store, 1)
    (Path(store.root) / "index" / "CURRENT").write_text("{}")
    with pytest.raises(ArtifactError, match="corrupt index pointer"):
        load_index(store)
