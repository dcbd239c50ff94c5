"""The cache: an artifact's key is its stage config's hash plus the content hashes of its inputs,
the stage's own code among them, so an artifact that exists is a cache hit and a code change
is not. `CachedStage` is the one path every cached stage takes (key, lookup, write, publish);
`code_version` hashes the source a stage's runner imports, found by parsing, not listed by hand.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from realm_core.errors import ArtifactError, ConfigError, MissingArtifactError
from realm_core.store.artifacts import Artifact, ArtifactStore, ArtifactWriter, StageResult

# Modules that carry artifacts, configs and errors around but compute nothing a stage writes:
# left out of code hashes, so that a new config field or a reworded error is not a cache miss
# of every stage (config values are hashed on their own).
NOT_SCIENCE = frozenset({
    "realm_core.store", "realm_core.store.artifacts", "realm_core.store.scratch", "realm_core.store.cache",
    "realm_core.store.versions", "realm_core.errors", "realm_core.progress", "realm_core.config",
    "realm_core.config.tree", "realm_core.config.stage", "realm_core.config.training", "realm_core.presets",
    "realm_core.systems", "realm_core.graph", "realm_core.graph.stages", "realm_core.graph.resolver", "realm_core.jobs",
    "realm_core.retrieval.versions",  # publishes index versions and points at one
})


def _source(module: str) -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, AttributeError):  # a name inside a module, not a module
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


@cache
def module_closure(module: str) -> tuple[str, ...]:
    """`module` and every realm_core module it imports, directly or not, lazy imports included
    (parsed, not executed), less `NOT_SCIENCE`: what a stage's code hash covers."""
    import ast

    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_SCIENCE or (path := _source(name)) is None:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("realm_core.")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("realm_core"):
                base = str(node.module)
                todo += [base] + [f"{base}.{a.name}" for a in node.names if _source(f"{base}.{a.name}")]
    return tuple(sorted(seen))


@cache
def code_version(modules: tuple[str, ...], packages: tuple[str, ...] = ()) -> str:
    """Hash of the source of the modules that compute a stage (each given module and every
    realm_core module it imports, found by `module_closure`, not listed by hand), plus the
    versions of the packages it leans on: a code change invalidates the stage's cached
    artifacts without a manual bump."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256()
    for name in sorted({m for root in modules for m in module_closure(root)}):
        path = _source(name)
        assert path is not None
        h.update(name.encode() + b"\0" + path.read_bytes())
    for package in packages:
        try:
            h.update(f"{package}=={version(package)}".encode())
        except PackageNotFoundError:
            h.update(f"{package}==absent".encode())
    return h.hexdigest()


def artifact_key(config_hash: str, inputs: Mapping[str, str]) -> str:
    """Deterministic key of an artifact: its config plus the content of what it was made from."""
    h = hashlib.sha256(config_hash.encode())
    for name in sorted(inputs):
        h.update(f"\0{name}={inputs[name]}".encode())
    return h.hexdigest()[:20]


_EXISTING_ONLY: ContextVar[bool] = ContextVar("existing_artifacts_only", default=False)


@contextmanager
def existing_artifacts_only() -> Iterator[None]:
    """Inside it a cache miss is a MissingArtifactError instead of a computed stage: the query
    side serves what the pipeline produced (a question that started a training run would hold
    its request for minutes)."""
    token = _EXISTING_ONLY.set(True)
    try:
        yield
    finally:
        _EXISTING_ONLY.reset(token)


class Configured(Protocol):
    """What a stage config offers the cache (every `StageConfig` does)."""

    def config_hash(self) -> str: ...
    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


@dataclass
class CachedStage:
    """One stage run through the cache, the only path every cached stage takes: the key from
    the config hash and the inputs' hashes (the stage's code hash among them); a lookup; on a
    miss one write into a run-scoped temp directory published by one rename; the result read
    back from the published manifest. The runner writes its tables, files, `stats` and optional
    `report` (markdown) through `write()`; a hit returns the same stats and report.

        cache = CachedStage(store, "blocks", config, {"documents": ref.content_hash, "code": ...}, force)
        if cache.hit:
            return cache.hit
        ...                      # the work
        with cache.write() as out:
            out.table("blocks").write(rows)
            out.extra_manifest["stats"] = stats
        return cache.result()
    """

    store: ArtifactStore
    kind: str
    config: Configured | Mapping[str, Any]  # a stage config, or the part of one a stage reads
    inputs: Mapping[str, str]
    force: bool = False
    config_hash: str = field(init=False)
    key: str = field(init=False)
    _hit: StageResult | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.config_hash = (artifact_key(json.dumps(self.config, sort_keys=True), {})
                            if isinstance(self.config, Mapping) else self.config.config_hash())
        self.key = artifact_key(self.config_hash, self.inputs)

    def _config_dump(self) -> dict[str, Any]:
        return dict(self.config) if isinstance(self.config, Mapping) else self.config.model_dump(mode="json")

    @property
    def hit(self) -> StageResult | None:
        """The published artifact of this key (None on a miss, or always when forced). A hit is
        looked up and verified once: every stage asks `if cache.hit: return cache.hit`."""
        if self._hit is not None:
            return self._hit
        found = None if self.force else self.store.lookup(self.kind, self.key)
        if found is None and _EXISTING_ONLY.get():
            raise MissingArtifactError(f"{self.store.root}: no {self.kind} artifact for this config and code "
                                       f"({self.kind}/{self.key})")
        self._hit = None if found is None else self._result(found, cached=True)
        return self._hit

    @property
    def checkpoints(self) -> Path:
        """Where a training stage checkpoints this run: `<root>/checkpoints/<kind>-<key>`, so a
        run killed at any moment and run again with the same config resumes there. A local root
        only (a checkpoint is published by renaming a directory)."""
        if not self.store.local:
            raise ConfigError(f"{self.store.url}: training checkpoints need a local artifact root")
        return Path(self.store.root) / "checkpoints" / f"{self.kind}-{self.key}"

    @contextmanager
    def write(self) -> Iterator[ArtifactWriter]:
        """Write the artifact; once it is published, the run's checkpoints (if any) are removed:
        a finished run leaves nothing to resume."""
        with self.store.write(self.kind, self.key, config=self._config_dump(),
                              config_hash=self.config_hash, inputs=self.inputs, replace=self.force) as out:
            yield out
            if "stats" not in out.extra_manifest:
                raise ArtifactError(f"{self.kind}/{self.key}: the stage wrote no stats")
        if self.store.local:
            shutil.rmtree(Path(self.store.root) / "checkpoints" / f"{self.kind}-{self.key}", ignore_errors=True)

    def result(self) -> StageResult:
        """The artifact just published under this key (by this process or, on a rank other than
        0, by rank 0)."""
        found = self.store.lookup(self.kind, self.key, verify=False)  # its files were just hashed
        if found is None:
            raise ArtifactError(f"{self.kind}/{self.key}: not published")
        return self._result(found, cached=False)

    @staticmethod
    def _result(art: Artifact, cached: bool) -> StageResult:
        return StageResult(art.ref, cached, art.manifest.get("stats", {}), art.manifest.get("report", ""))
