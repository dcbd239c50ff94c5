"""Damage an artifact's file as a disk, a sync or a careless hand would, for the integrity tests:
each keeps the file's name so that only the manifest's sizes and hashes can tell."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def truncate(path: Path) -> None:
    """Cut the file in half (a copy that stopped mid-way)."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)


def random_bytes(path: Path) -> None:
    """The same number of bytes, other content (bit rot, a write from elsewhere)."""
    path.write_bytes(os.urandom(path.stat().st_size))


def remove(path: Path) -> None:
    path.unlink()


def bad_json(path: Path) -> None:
    """A JSON file cut mid-object."""
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate, "random bytes": random_bytes, "missing": remove}
