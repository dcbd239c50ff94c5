"""The one writer of `CURRENT` pointers (the MIPS index's and the knowledge corpus's)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from realm_core.errors import ArtifactError
from realm_core.store.versions import POINTER, Pointer

ROOT = Path(__file__).resolve().parents[2]


def _version(folder: Path, number: int) -> None:
    (folder / f"v{number:08d}").mkdir(parents=True)
    (folder / f"v{number:08d}" / "manifest.json").write_text("{}")


def test_pointer_reads_what_it_wrote_and_lists_published_versions(tmp_path: Path) -> None:
    pointer = Pointer(tmp_path, "version", "knowledge")
    assert pointer.read() is None and pointer.versions() == []
    _version(tmp_path, 2)
    _version(tmp_path, 1)
    (tmp_path / "v00000003").mkdir()  # no manifest: not published
    pointer.write(2, note="x")
    assert pointer.read() == 2 and pointer.versions() == [1, 2]
    assert (tmp_path / POINTER).read_text() == '{"version": 2, "note": "x"}'


def test_a_corrupt_pointer_is_an_artifact_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / POINTER).write_text("{not json")
    with pytest.raises(ArtifactError, match=r"CURRENT: corrupt index pointer"):
        Pointer(tmp_path, "step", "index").read()


def test_the_lock_is_reentrant_in_its_thread_and_excludes_others(tmp_path: Path) -> None:
    pointer = Pointer(tmp_path, "version", "knowledge")
    order: list[str] = []

    def other() -> None:
        with Pointer(tmp_path, "version", "knowledge").lock():
            order.append("other")

    with pointer.lock():
        with pointer.lock():  # the same thread takes it again without waiting
            order.append("inner")
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        order.append("outer")
    thread.join(5)
    assert order == ["inner", "outer", "other"]


def test_taking_the_lock_removes_what_dead_writers_left(tmp_path: Path) -> None:
    (tmp_path / ".tmp-v00000002-dead").mkdir(parents=True)
    (tmp_path / f".{POINTER}.123.abc").write_text("{}")
    (tmp_path / ".tmp-other").mkdir()  # not named as a leftover: kept
    with Pointer(tmp_path, "version", "knowledge", leftovers=(".tmp-v*",)).lock():
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".tmp-other"]


def test_pointer_files_are_written_in_one_place() -> None:
    """No module but store/versions.py names the pointer file or replaces it."""
    writers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "realm_core").rglob("*.py")
                     if re.search(r"[\"']CURRENT[\"']|os\.replace\([^)]*POINTER", p.read_text()))
    assert writers == ["realm_core/store/versions.py"], writers
