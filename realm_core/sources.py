"""The data sources registry (data/sources.yaml) and a verifying downloader."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from realm_core.config import PROJECT_DIR
from realm_core.errors import InputError, RealmError
from realm_core.store.artifacts import sha256_file

REGISTRY = PROJECT_DIR / "data" / "sources.yaml"
DOWNLOADS = PROJECT_DIR / "data" / "downloads"


@dataclass(frozen=True)
class Source:
    name: str
    path: str
    url: str
    sha256: str
    format: str
    licence: str
    derive: dict[str, Any] | None = None


def load_registry(path: Path = REGISTRY) -> dict[str, Source]:
    try:
        raw = yaml.safe_load(path.read_text())["sources"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as e:
        raise InputError(path, "a YAML mapping with a 'sources' section", found=str(e)) from None
    return {name: Source(name=name, **fields) for name, fields in raw.items()}


def _derive(source: Source, downloaded: Path, target: Path) -> None:
    """Deterministic slices of an upstream file, serialised as the bundled copy was."""
    assert source.derive is not None
    if set(source.derive) != {"squad_first_articles"}:
        raise RealmError(f"{source.name}: unknown derive step {source.derive}")
    n = int(source.derive["squad_first_articles"])
    full = json.loads(downloaded.read_text(encoding="utf-8"))
    target.write_text(json.dumps({"version": full["version"], "data": full["data"][:n]}),
                      encoding="utf-8")


def fetch(name: str, dest: Path = DOWNLOADS, url: str | None = None,
          registry: dict[str, Source] | None = None) -> Path:
    """Download a registered source into dest/<path>; keep it only if its sha256 matches."""
    sources = registry if registry is not None else load_registry()
    if name not in sources:
        raise RealmError(f"unknown source {name!r}; known: {', '.join(sorted(sources))}")
    source = sources[name]
    target = dest / source.path
    if target.is_file() and sha256_file(target) == source.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + f".part{os.getpid()}")
    raw = part.with_name(part.name + ".raw")
    try:
        try:
            with urllib.request.urlopen(url or source.url, timeout=60) as r, open(raw, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
        except OSError as e:
            raise RealmError(f"{source.name}: download from {url or source.url} failed: {e}") from e
        if source.derive:
            _derive(source, raw, part)
        else:
            raw.rename(part)
        got = sha256_file(part)
        if got != source.sha256:
            raise RealmError(f"{source.name}: sha256 mismatch for {url or source.url}: expected "
                             f"{source.sha256}, got {got}; file discarded")
        part.rename(target)
    finally:
        for p in (part, raw):
            p.unlink(missing_ok=True)
    return target
