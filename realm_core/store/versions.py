"""Numbered versions behind one pointer: a folder of `v<NNNNNNNN>/` versions, each published whole
with its `manifest.json`, and a `CURRENT` file naming the live one. The MIPS index
(`realm_core.retrieval.versions`) and the knowledge corpus (`realm_core.retrieval.knowledge_versions`)
are both kept this way, and `Pointer` is the one writer of their pointers: the file is replaced
whole by `os.replace` under the folder's lock, so a reader sees the old version or the new one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from realm_core.errors import ArtifactError

POINTER = "CURRENT"


def version_name(number: int) -> str:
    return f"v{number:08d}"


class Pointer:
    """The `CURRENT` file of a versions folder. It holds `{field: number, **extra}`; `what`
    names the versions in errors ("index", "knowledge"). `leftovers` are globs of what a writer
    that died mid-publish leaves in the folder, removed by the next holder of the lock."""

    def __init__(self, folder: Path, field: str, what: str, leftovers: tuple[str, ...] = ()) -> None:
        self.folder, self.field, self.what = Path(folder), field, what
        self.leftovers = (f".{POINTER}.*", *leftovers)
        self._holder: int | None = None  # the thread holding the lock through this object
        self._depth = 0

    def read(self) -> int | None:
        """The number the pointer names (None when there is none yet); a pointer that does not
        parse is an ArtifactError naming it."""
        path = self.folder / POINTER
        if not path.is_file():
            return None
        try:
            return int(json.loads(path.read_text())[self.field])
        except (ValueError, KeyError, TypeError) as e:
            raise ArtifactError(f"{path}: corrupt {self.what} pointer ({e})") from None

    def versions(self) -> list[int]:
        """The numbers of the published versions (those with a manifest), ascending."""
        return sorted(int(p.parent.name[1:]) for p in self.folder.glob("v*/manifest.json"))

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Held by every change of the versions, from reading the pointer to writing it, so that no
        change is built on a version another has replaced: other processes and threads wait.
        Re-entrant in the thread that holds it through this object. Taking it, a writer removes
        what dead writers left (`leftovers`)."""
        me = threading.get_ident()
        if self._holder == me:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            self._holder, self._depth = me, 1
            try:
                for pattern in self.leftovers:  # with the lock held, no live writer is mid-publish
                    for p in self.folder.glob(pattern):
                        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                yield
            finally:
                self._holder, self._depth = None, 0
                fcntl.flock(f, fcntl.LOCK_UN)

    def write(self, number: int, **extra: Any) -> None:
        """Point at version `number`: the file is replaced whole, under the lock."""
        with self.lock():
            tmp = self.folder / f".{POINTER}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
            tmp.write_text(json.dumps({self.field: number, **extra}))
            os.replace(tmp, self.folder / POINTER)
