"""The artifact store: every stage output is a directory of Parquet tables (or library-native
files: faiss index, safetensors) plus `manifest.json`, published atomically.

    root/<kind>/<key>/manifest.json
    root/<kind>/<key>/<table>/part-00000.parquet

`key` is derived from the stage's config hash and its inputs' content hashes, so it doubles as the
cache key: an artifact that already exists with a valid manifest is a cache hit, once its files
are checked against the manifest (`Artifact.verify`: each file's size, and its sha256 unless the
store verifies sizes only, as it does on object storage by default). Paths go through
fsspec so that the root may later be an object-store URL; on a local disk publication is one
`rename` of a finished temp directory, elsewhere the manifest is written last.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from realm_core import __version__
from realm_core.errors import ArtifactError, CorruptArtifactError
from realm_core.store.schemas import SCHEMAS, TableSchema
from realm_core.store.scratch import exchange_paths, scratch_name, sweep_scratch

MANIFEST = "manifest.json"
STORE_PREFIX = "store:"  # a manifest's name for a path inside its own store (`ArtifactStore.relative`)
VERIFY_MODES = ("content", "size")  # what a cache hit checks: sha256 and size of every file, or sizes


# A local file's digest, remembered for this process by its identity and stat (device, inode, size,
# mtime): evaluation keys each system by its encoders' content, so the same weights are asked for
# many times a run.
_DIGESTS: dict[tuple[int, int, int, int], str] = {}
RACY_S = 2.0  # a file modified this recently is hashed every time: its mtime may not move yet


def sha256_file(path: str | Path, fs: Any = None, chunk: int = 1 << 20) -> str:
    stamp = None
    if fs is None:
        st = os.stat(path)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if (known := _DIGESTS.get(stamp)) is not None:
            return known
    h = hashlib.sha256()
    opener = fs.open if fs is not None else open
    with opener(str(path), "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    digest = h.hexdigest()
    # like git's racily clean entries: a file written within the clock's granularity of this read
    # could change again without its mtime changing, so only settled files are remembered
    if stamp is not None and stamp[-1] < time.time_ns() - RACY_S * 1e9:
        _DIGESTS[stamp] = digest
    return digest


@dataclass(frozen=True)
class ArtifactRef:
    """What flows pass between stages: never DataFrames, only where and what."""

    kind: str
    path: str
    content_hash: str


@dataclass
class StageResult:
    """What every stage function returns: its artifact, whether it was a cache hit, its stats."""

    ref: ArtifactRef
    cached: bool
    stats: dict[str, Any] = field(default_factory=dict)
    report: str = ""  # extra markdown for the stage report (curves, tables)


@dataclass
class Artifact:
    """A published artifact, opened for reading. Reading validates manifest and schema."""

    path: str
    manifest: dict[str, Any]
    fs: Any

    @property
    def ref(self) -> ArtifactRef:
        return ArtifactRef(self.manifest["kind"], self.path, self.manifest["content_hash"])

    def made_from(self, **inputs: ArtifactRef) -> Artifact:
        """This artifact, after checking that it was made from each given input (by the content
        hash its manifest records): a stage that reads two artifacts refuses a pair that do not
        belong together, before any work."""
        for name, ref in inputs.items():
            if self.manifest.get("inputs", {}).get(name) != ref.content_hash:
                raise ArtifactError(f"{self.path}: the {self.kind} artifact was made from other {name} than "
                                    f"{ref.path}; give it the {name} it was made from, or recompute it from these")
        return self

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    def rows(self, table: str) -> int:
        return int(self.manifest["rows"][table])

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def verify(self, mode: str = "content") -> int:
        """Check every file the manifest lists against it: present, of its recorded size and
        (mode `content`) of its recorded sha256. A mismatch is a `CorruptArtifactError` naming
        the file. Returns the bytes checked. Manifests written before sizes were recorded are
        checked by content in either mode."""
        if mode not in VERIFY_MODES:
            raise ArtifactError(f"verify mode {mode!r}: expected one of {', '.join(VERIFY_MODES)}")
        sizes: dict[str, int] = self.manifest.get("sizes", {})
        checked = 0
        for name, digest in sorted(self.manifest["files"].items()):
            path = f"{self.path}/{name}"
            try:
                size = int(self.fs.info(path)["size"])
            except FileNotFoundError:
                raise CorruptArtifactError(path, "missing: the manifest lists it") from None
            if name in sizes and size != sizes[name]:
                raise CorruptArtifactError(path, f"{size:,} bytes where the manifest records {sizes[name]:,}")
            if mode == "content" or name not in sizes:
                found = sha256_file(path, None if isinstance(self.fs, LocalFileSystem) else self.fs)
                if found != digest:
                    raise CorruptArtifactError(path, f"sha256 {found[:12]} where the manifest records {digest[:12]}")
            checked += size
        return checked

    def _parts(self, table: str) -> list[str]:
        parts = sorted(p for p in self.manifest["files"] if p.startswith(f"{table}/"))
        if not parts:
            raise ArtifactError(f"{self.path}: artifact has no table {table!r}")
        return [f"{self.path}/{p}" for p in parts]

    def _check_columns(self, table: str, part: str, schema: pa.Schema) -> None:
        expected = SCHEMAS.get(table)
        if expected is None:
            return
        missing = [c for c in expected.required if c not in schema.names]
        if missing:
            raise ArtifactError(f"{part}: table {table!r} lacks columns {missing}; expected "
                                f"{expected.required} (schema v{expected.version})")

    def iter_batches(self, table: str, columns: list[str] | None = None,
                     batch_size: int = 4096) -> Iterator[pa.RecordBatch]:
        for part in self._parts(table):
            with self.fs.open(part, "rb") as f:
                pf = pq.ParquetFile(f)
                self._check_columns(table, part, pf.schema_arrow)
                yield from pf.iter_batches(batch_size=batch_size, columns=columns)

    def read_rows(self, table: str, start: int, stop: int, columns: list[str] | None = None) -> pa.Table:
        """Rows [start, stop) of a table, reading only the part files that hold them."""
        tables, offset = [], 0
        for part in self._parts(table):
            with self.fs.open(part, "rb") as f:
                pf = pq.ParquetFile(f)
                n = pf.metadata.num_rows
                if offset < stop and offset + n > start:
                    self._check_columns(table, part, pf.schema_arrow)
                    lo, hi = max(start - offset, 0), min(stop - offset, n)
                    tables.append(pf.read(columns=columns).slice(lo, hi - lo))
            offset += n
            if offset >= stop:
                break
        if not tables:
            raise ArtifactError(f"{self.path}: table {table!r} has no rows [{start}, {stop})")
        return pa.concat_tables(tables)

    def read_table(self, table: str, columns: list[str] | None = None) -> pa.Table:
        tables = []
        for part in self._parts(table):
            with self.fs.open(part, "rb") as f:
                pf = pq.ParquetFile(f)
                self._check_columns(table, part, pf.schema_arrow)
                tables.append(pf.read(columns=columns))
        return pa.concat_tables(tables)


class TableWriter:
    """Streams record batches into `<table>/part-NNNNN.parquet`, rolling over every N rows."""

    def __init__(self, directory: Path, schema: TableSchema, rows_per_file: int) -> None:
        self.directory = directory
        self.schema = schema
        self.rows_per_file = rows_per_file
        self.rows = 0
        self._part = 0
        self._in_part = 0
        self._writer: pq.ParquetWriter | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, data: pa.Table | pa.RecordBatch | list[dict[str, Any]]) -> None:
        table = (pa.Table.from_pylist(data, schema=self.schema.schema) if isinstance(data, list)
                 else pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data)
        try:
            table = table.select(self.schema.required).cast(self.schema.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise ArtifactError(f"rows for {self.schema.kind!r} do not fit schema "
                                f"v{self.schema.version}: {e}") from e
        offset = 0
        while offset < table.num_rows:
            if self._writer is None:
                path = self.directory / f"part-{self._part:05d}.parquet"
                self._writer = pq.ParquetWriter(path, self.schema.schema, compression="zstd")
            take = min(self.rows_per_file - self._in_part, table.num_rows - offset)
            self._writer.write_table(table.slice(offset, take))
            offset += take
            self._in_part += take
            self.rows += take
            if self._in_part >= self.rows_per_file:
                self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._part += 1
            self._in_part = 0


@dataclass
class ArtifactWriter:
    """A run-scoped temp directory that becomes an artifact on publication."""

    kind: str
    tmp: Path
    tables: dict[str, TableWriter] = field(default_factory=dict)
    extra_manifest: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str, rows_per_file: int = 100_000) -> TableWriter:
        if name not in self.tables:
            if name not in SCHEMAS:
                raise ArtifactError(f"no schema registered for table {name!r}")
            self.tables[name] = TableWriter(self.tmp / name, SCHEMAS[name], rows_per_file)
        return self.tables[name]

    def file(self, name: str) -> Path:
        """Local path for a library-native file (faiss index, safetensors, PNG)."""
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


class ArtifactStore:
    """Artifacts under one root. `verify` is what a cache hit checks of the artifact it serves
    (`Artifact.verify`): `content` (sizes and sha256; the default on a local disk, where hashing
    runs at about 1 GB/s and each file is hashed once a process) or `size` (the default on object
    storage, where hashing would download every file); REALM_VERIFY sets it for every store."""

    def __init__(self, root: str | os.PathLike[str], verify: str | None = None) -> None:
        self.url = str(root)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.verify = verify or os.environ.get("REALM_VERIFY") or ("content" if self.local else "size")
        if self.verify not in VERIFY_MODES:
            raise ArtifactError(f"REALM_VERIFY={self.verify!r}: expected one of {', '.join(VERIFY_MODES)}")
        if self.local:
            try:
                Path(self.root).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ArtifactError(f"{self.root}: cannot create the artifact root here "
                                    f"({e.strerror or type(e).__name__})") from None
            if not Path(self.root).is_dir():
                raise ArtifactError(f"{self.root}: expected a directory for the artifact root, found a file")

    def path(self, kind: str, key: str) -> str:
        return f"{self.root}/{kind}/{key}"

    def lookup(self, kind: str, key: str, verify: bool = True) -> Artifact | None:
        """The published artifact for this key, or None (a cache miss). With `verify` (a cache
        hit about to be served) its files are checked first: `CorruptArtifactError` if they
        disagree with the manifest."""
        path = self.path(kind, key)
        if not self.fs.exists(f"{path}/{MANIFEST}"):
            return None
        art = self.open(path, kind=kind)
        if verify:
            art.verify(self.verify)
        return art

    def relative(self, path: str) -> str:
        """How a manifest names `path`: relative to the root (`retriever/<key>/doc_encoder`) when
        it lies in this store, so that a store copied or moved still finds its own files; a path
        outside the store (a bundled encoder) as it is."""
        root = str(self.root).rstrip("/")
        p = str(path)
        if p.startswith(root + "/"):
            return STORE_PREFIX + p[len(root) + 1:]
        return p

    def resolve(self, name: str) -> str:
        """The path a manifest's `name` (`relative`'s output) has in this store. An absolute path
        written by an older manifest that points into another copy of this store (or a place
        that is gone) is looked for under this root by its trailing `<kind>/<key>/...`."""
        if name.startswith(STORE_PREFIX):
            return f"{str(self.root).rstrip('/')}/{name[len(STORE_PREFIX):]}"
        parts = Path(name).parts
        for i in range(len(parts) - 2, 0, -1):
            here = Path(self.root, *parts[i:])
            if (Path(self.root, *parts[i:i + 2]) / MANIFEST).is_file() and here.exists():
                return str(here)
        return name

    def open(self, path: str | ArtifactRef, kind: str | None = None) -> Artifact:
        p = path.path if isinstance(path, ArtifactRef) else str(path)
        _, p = fsspec.core.url_to_fs(p) if "://" in p else (None, p)
        mpath = f"{p}/{MANIFEST}"
        if not self.fs.exists(mpath):
            raise ArtifactError(f"{p}: no {MANIFEST}; not an artifact, or never finished")
        try:
            with self.fs.open(mpath, "r") as f:
                manifest = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise CorruptArtifactError(mpath, f"corrupt manifest: expected a JSON object ({type(e).__name__})") from None
        if not isinstance(manifest, dict):
            raise CorruptArtifactError(mpath, "corrupt manifest: expected a JSON object")
        for k in ("kind", "schema_version", "content_hash", "files", "rows"):
            if k not in manifest:
                raise CorruptArtifactError(mpath, f"manifest lacks {k!r}")
        if kind is not None and manifest["kind"] != kind:
            raise ArtifactError(f"{p}: expected a {kind!r} artifact, found {manifest['kind']!r}")
        schema = SCHEMAS.get(manifest["kind"])
        if schema is not None and manifest["schema_version"] != schema.version:
            raise ArtifactError(f"{p}: {manifest['kind']} schema version "
                                f"{manifest['schema_version']} is not the supported {schema.version}")
        return Artifact(p, manifest, self.fs)

    @contextmanager
    def write(self, kind: str, key: str, *, config: Mapping[str, Any], config_hash: str,
              inputs: Mapping[str, str], replace: bool = False) -> Iterator[ArtifactWriter]:
        """Write into a temp dir; publish on success, remove on any exception.

        If another run published the same key meanwhile, its copy wins: both were made from the
        same inputs and config, and readers never see a directory change under them. `replace`
        (a forced rerun) swaps the published copy for the new one instead.
        """
        scratch_root = Path(self.root) / ".tmp" if self.local else Path(tempfile.gettempdir())
        scratch_root.mkdir(parents=True, exist_ok=True)
        if self.local:
            sweep_scratch(scratch_root)
        tmp = scratch_root / scratch_name(kind, key)
        tmp.mkdir()
        writer = ArtifactWriter(kind, tmp)
        try:
            yield writer
            for t in writer.tables.values():
                t.close()
            paths = [p for p in sorted(tmp.rglob("*")) if p.is_file()]
            files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in paths}
            sizes = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in paths}
            content = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in files.items()).encode())
            schema = SCHEMAS.get(kind)
            manifest = {
                "kind": kind,
                "schema_version": schema.version if schema else 1,
                "content_hash": content.hexdigest(),
                "config_hash": config_hash,
                "config": dict(config),
                "inputs": dict(inputs),
                "rows": {name: t.rows for name, t in writer.tables.items()},
                "files": files,
                "sizes": sizes,
                "package_version": __version__,
                "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                **writer.extra_manifest,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            self._publish(tmp, self.path(kind, key), replace)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _publish(self, tmp: Path, final: str, replace: bool) -> None:
        if replace and self.fs.exists(final):
            if self.local:
                # One atomic swap: a reader sees the old artifact or the new one, never none.
                if exchange_paths(tmp, Path(final)):
                    shutil.rmtree(tmp, ignore_errors=True)  # now the replaced artifact
                    return
                trash = tmp.with_name(tmp.name + "-replaced")
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                self.fs.rm(final, recursive=True)
        if self.local:
            Path(final).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not Path(final, MANIFEST).exists():
                    raise
            return
        if self.fs.exists(f"{final}/{MANIFEST}"):
            return
        for p in sorted(tmp.rglob("*")):
            if p.is_file() and p.name != MANIFEST:
                self.fs.put_file(str(p), f"{final}/{p.relative_to(tmp).as_posix()}")
        self.fs.put_file(str(tmp / MANIFEST), f"{final}/{MANIFEST}")  # published last
