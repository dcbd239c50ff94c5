"""Versioned MIPS indexes: `index/v<retriever step>` artifacts and an atomic `CURRENT` pointer.

REALM refreshes its index while training goes on (§3.4, asynchronous MIPS refresh): a new
version is built beside the old one, published whole, and only then made current. The pointer
is one small JSON file replaced by `os.replace` under a lock, so a reader sees either the old
version or the new one, never a half-built index (`realm_core.store.versions.Pointer`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from realm_core.errors import RealmError
from realm_core.retrieval.index import MipsIndex
from realm_core.store.artifacts import Artifact, ArtifactRef, ArtifactStore
from realm_core.store.versions import Pointer, version_name

KIND = "index"


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


def _pointer(store: ArtifactStore) -> Pointer:
    if not store.local:
        raise RealmError("index versions need a local artifact root for now (pointer lock)")
    return Pointer(Path(store.root) / KIND, "step", "index")


def set_current(store: ArtifactStore, step: int, *, only_if_newer: bool = True) -> bool:
    """Make version `step` current. With `only_if_newer`, a late refresh never replaces a newer
    index that another run already switched to. Returns whether the pointer moved."""
    name = version_name(step)
    if store.lookup(KIND, name, verify=False) is None:
        raise RealmError(f"index version {step} is not published under {store.path(KIND, '')}")
    pointer = _pointer(store)
    with pointer.lock():
        now = pointer.read()
        if only_if_newer and now is not None and now >= step:
            return False
        pointer.write(step, version=name)
    return True


def current_step(store: ArtifactStore) -> int | None:
    return Pointer(Path(store.root) / KIND, "step", "index").read()


def versions(store: ArtifactStore) -> list[int]:
    return Pointer(Path(store.root) / KIND, "step", "index").versions()


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
