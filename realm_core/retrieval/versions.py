"""Versioned MIPS indexes: `index/v<retriever step>` artifacts and an atomic `CURRENT` pointer.

REALM refreshes its index while training goes on (§3.4, asynchronous MIPS refresh): a new
version is built beside the old one, published whole, and only then made current. The pointer
is one small JSON file replaced by `os.replace` under a lock, so a reader sees either the old
version or the new one, never a half-built index.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from realm_core.artifacts import Artifact, ArtifactRef, ArtifactStore
from realm_core.errors import ArtifactError, RealmError
from realm_core.retrieval.index import MipsIndex

KIND = "index"
POINTER = "CURRENT"


def version_name(step: int) -> str:
    return f"v{step:08d}"


def publish_index(store: ArtifactStore, step: int, index: MipsIndex, *, encoder_checkpoint: str,
                  embeddings_hash: str, blocks_hash: str, replace: bool = False) -> ArtifactRef:
    """Write index version `step` (not yet current). Publishing an existing step is refused
    unless `replace` (a forced rebuild: the same one-rename swap as any forced artifact). The
    manifest names the document encoder by its store-relative path where it lies in the store
    (`ArtifactStore.relative`; read back by `encoder_dir`)."""
    name = version_name(step)
    if store.lookup(KIND, name, verify=False) is not None and not replace:
        raise RealmError(f"{store.path(KIND, name)}: index version {step} exists already")
    config = {"factory": index.factory, "dim": index.dim}
    config_hash = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    with store.write(KIND, name, config=config, config_hash=config_hash,
                     inputs={"embeddings": embeddings_hash, "blocks": blocks_hash}, replace=replace) as out:
        index.save(out.tmp)
        out.extra_manifest.update({"step": step, "encoder_checkpoint": store.relative(encoder_checkpoint),
                                   "n_blocks": len(index), "factory": index.factory})
    published = store.lookup(KIND, name, verify=False)
    assert published is not None
    return published.ref


def encoder_dir(store: ArtifactStore, art: Artifact) -> str:
    """The document encoder directory an index version was embedded with, in this store."""
    return store.resolve(str(art.manifest["encoder_checkpoint"]))


def _index_dir(store: ArtifactStore) -> Path:
    if not store.local:
        raise RealmError("index versions need a local artifact root for now (pointer lock)")
    path = Path(store.root) / KIND
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _pointer_lock(store: ArtifactStore) -> Iterator[None]:
    with open(_index_dir(store) / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def set_current(store: ArtifactStore, step: int, *, only_if_newer: bool = True) -> bool:
    """Make version `step` current. With `only_if_newer`, a late refresh never replaces a newer
    index that another run already switched to. Returns whether the pointer moved."""
    name = version_name(step)
    if store.lookup(KIND, name, verify=False) is None:
        raise RealmError(f"index version {step} is not published under {store.path(KIND, '')}")
    directory = _index_dir(store)
    with _pointer_lock(store):
        now = current_step(store)
        if only_if_newer and now is not None and now >= step:
            return False
        tmp = directory / f".{POINTER}.{os.getpid()}"
        tmp.write_text(json.dumps({"step": step, "version": name}))
        os.replace(tmp, directory / POINTER)
    return True


def read_pointer(pointer: Path, field: str, what: str) -> int | None:
    """The number a `CURRENT` pointer file names under `field` (None when there is no pointer
    yet); a pointer that does not parse is an ArtifactError naming it as `what`."""
    if not pointer.is_file():
        return None
    try:
        return int(json.loads(pointer.read_text())[field])
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{pointer}: corrupt {what} pointer ({e})") from None


def current_step(store: ArtifactStore) -> int | None:
    return read_pointer(Path(store.root) / KIND / POINTER, "step", "index")


def versions(store: ArtifactStore) -> list[int]:
    root = Path(store.root) / KIND
    return sorted(int(p.parent.name[1:]) for p in root.glob("v*/manifest.json"))


def load_index(store: ArtifactStore, step: int | None = None) -> tuple[MipsIndex, Artifact]:
    """The current index (or version `step`) with its manifest."""
    if step is None:
        step = current_step(store)
        if step is None:
            raise RealmError(f"{Path(store.root) / KIND}: no current index; build one first")
    art = store.lookup(KIND, version_name(step))
    if art is None:
        raise RealmError(f"index version {step} not found; available: {versions(store) or 'none'}")
    manifest: dict[str, Any] = art.manifest
    return MipsIndex.load(Path(art.path), manifest.get("factory", "unknown")), art
