"""A knowledge corpus's versions on disk: `KnowledgeCorpus` (its folder, lock and pointer, and
`publish`, the one way a version is made), `KnowledgeVersion` (one version's blocks and vectors,
checked as they are read) and `VersionWriter` (a new version's files, a batch at a time). The
layout is in `realm_core.knowledge`; what goes into a new version is `realm_core.knowledge.update`.

Shapes: N blocks of a version, D embedding dim, M the id range (the next free block id).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from realm_core.errors import ArtifactError, ConfigError, CorruptArtifactError
from realm_core.store.artifacts import sha256_file
from realm_core.store.versions import Pointer, version_name

FOLDER = "knowledge"
SCHEMA_VERSION = 1
BLOCK_SCHEMA = pa.schema([
    ("block_id", pa.int64()),   # stable across versions; never reused
    ("doc_id", pa.string()),
    ("source", pa.string()),    # the file or corpus the document came from (what `remove_sources` names)
    ("doc_hash", pa.string()),  # sha256 of the document's title and text: unchanged documents are kept
    ("title", pa.string()),
    ("text", pa.string()),
])

Document = dict[str, Any]
Embed = Callable[[list[str], list[str]], np.ndarray]  # (titles, texts) -> (n, D) vectors


def doc_hash(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\0{text}".encode()).hexdigest()


def vectors_file(encoder_hash: str) -> str:
    return f"vectors-{encoder_hash[:16]}.npy"


@dataclass
class KnowledgeVersion:
    """One published version: its blocks (by stable id) and each tracked encoder's vectors."""

    path: Path
    manifest: dict[str, Any]

    @property
    def number(self) -> int:
        return int(self.manifest["version"])

    @cached_property
    def table(self) -> pa.Table:
        path = self.check("blocks.parquet")
        try:
            return pq.read_table(path)
        except (OSError, pa.ArrowException) as e:
            raise CorruptArtifactError(path, f"unreadable Parquet ({type(e).__name__}: {str(e)[:200]})") from None

    @cached_property
    def block_ids(self) -> np.ndarray:
        """(N,) the live blocks' ids, ascending."""
        ids: np.ndarray = self.table.column("block_id").to_numpy()
        return ids

    @property
    def id_range(self) -> int:
        """M: one past the largest id ever given (removed blocks' ids included)."""
        return int(self.manifest["next_block_id"])

    def dense(self, column: str) -> list[str]:
        """`column` (title or text) for every id of the range, "" where no live block has the id:
        a list that block ids index."""
        out = [""] * self.id_range
        for z, value in zip(self.block_ids.tolist(), self.table.column(column).to_pylist(), strict=True):
            out[z] = value
        return out

    @property
    def encoders(self) -> dict[str, dict[str, Any]]:
        """Tracked document encoders by content hash: each its directory and embed settings."""
        encoders: dict[str, dict[str, Any]] = self.manifest["encoders"]
        return encoders

    def documents(self) -> dict[str, tuple[str, str]]:
        """{doc_id: (doc_hash, source)} of the live documents: what an update is planned against
        (three short columns, never the texts)."""
        path = self.check("blocks.parquet")
        try:
            t = pq.read_table(path, columns=["doc_id", "doc_hash", "source"])
        except (OSError, pa.ArrowException) as e:
            raise CorruptArtifactError(path, f"unreadable Parquet ({type(e).__name__}: {str(e)[:200]})") from None
        return {d: (h, s) for d, h, s in zip(t.column("doc_id").to_pylist(), t.column("doc_hash").to_pylist(),
                                             t.column("source").to_pylist(), strict=True)}

    def batches(self, rows: int = 4096) -> Iterator[pa.Table]:
        """The live blocks, `rows` at a time in `block_ids` order: a new version is written from
        them without the whole table in memory."""
        path = self.check("blocks.parquet")
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=rows):
                yield pa.Table.from_batches([batch]).cast(BLOCK_SCHEMA)
        except (OSError, pa.ArrowException) as e:
            raise CorruptArtifactError(path, f"unreadable Parquet ({type(e).__name__}: {str(e)[:200]})") from None

    def vectors(self, encoder_hash: str, dense: bool = False, mmap: bool = False) -> np.ndarray:
        """(N, D) the live blocks' vectors by the encoder of `encoder_hash`, in `block_ids` order;
        `dense`: (M, D), rows by block id, zero where no live block has the id; `mmap`: mapped
        from the file, read as rows are used."""
        if encoder_hash not in self.encoders:
            raise ConfigError(f"{self.path}: no vectors of document encoder {encoder_hash[:16]}; this "
                              f"knowledge corpus tracks {', '.join(h[:16] for h in self.encoders) or 'none'} "
                              "(`realm add` embeds with the encoders of the current index and the systems)")
        path = self.check(vectors_file(encoder_hash))
        try:
            rows: np.ndarray = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
        except (OSError, ValueError) as e:
            raise CorruptArtifactError(path, f"unreadable vectors ({type(e).__name__}: {str(e)[:200]})") from None
        if not dense:
            return rows
        out = np.zeros((self.id_range, rows.shape[1]), dtype=np.float32)  # (M, D)
        out[self.block_ids] = rows
        return out

    def check(self, name: str, sizes_only: bool = False) -> Path:
        """File `name` of this version, once it is checked against the manifest: present, of its
        size and (unless `sizes_only`) of its sha256, hashed once per process while its size and
        mtime stay (`sha256_file`). A mismatch is a `CorruptArtifactError` naming the file."""
        path = self.path / name
        entry = self.manifest["files"].get(name)
        if entry is None:
            raise CorruptArtifactError(str(path), "the knowledge version's manifest does not list it")
        if not path.is_file() or path.stat().st_size != entry["size"]:
            raise CorruptArtifactError(str(path), f"expected {entry['size']:,} bytes as the knowledge "
                                                  "version's manifest lists")
        if not sizes_only and sha256_file(path) != entry["sha256"]:
            raise CorruptArtifactError(str(path), "its sha256 differs from the manifest's")
        return path

    def verify(self, sizes_only: bool = False) -> int:
        """Check every file the manifest lists (`check`); the bytes checked."""
        return sum(self.check(name, sizes_only).stat().st_size for name in self.manifest["files"])


class KnowledgeCorpus:
    """The versions of one knowledge corpus (a local folder)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.pointer = Pointer(self.root, "version", "knowledge", leftovers=(".tmp-v*",))

    @classmethod
    def of_store(cls, store: Any) -> KnowledgeCorpus:
        if not store.local:
            raise ConfigError(f"{store.url}: the knowledge corpus needs a local artifact root")
        return cls(Path(store.root) / FOLDER)

    def versions(self) -> list[int]:
        return self.pointer.versions()

    def current_number(self) -> int | None:
        return self.pointer.read()

    def version(self, number: int) -> KnowledgeVersion:
        path = self.root / version_name(number)
        if not (path / "manifest.json").is_file():
            raise ConfigError(f"{self.root}: no knowledge version {number}; versions: {self.versions() or 'none'}")
        try:
            manifest = json.loads((path / "manifest.json").read_text())
            manifest.get("schema_version")
        except (ValueError, AttributeError) as e:
            raise CorruptArtifactError(path / "manifest.json", f"expected a JSON object ({type(e).__name__})") from None
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise ArtifactError(f"{path}: knowledge schema version {manifest.get('schema_version')} is not "
                                f"the supported {SCHEMA_VERSION}")
        return KnowledgeVersion(path, manifest)

    def current(self) -> KnowledgeVersion | None:
        number = self.current_number()
        return None if number is None else self.version(number)

    def lock(self) -> AbstractContextManager[None]:
        """Every change of the corpus (its first version, an add, a removal, a rollback) holds this
        from reading the current pointer to publishing, so that no change is built on a version
        another has replaced: other processes and threads wait. Re-entrant in the thread that
        holds it (an add that makes the first version publishes twice under one hold). Taking
        it, a writer removes what dead writers left (`.tmp-*` folders, pointer temp files)."""
        return self.pointer.lock()

    def set_current(self, number: int) -> None:
        """Make version `number` current (also a rollback), under the lock: a rollback waits for
        an add in flight, and the add's version is then the one rolled back from."""
        with self.lock():
            self.version(number)  # exists and reads
            self.pointer.write(number)

    def publish(self, table: pa.Table, vectors: dict[str, np.ndarray], encoders: dict[str, dict[str, Any]],
                next_block_id: int, extra: dict[str, Any]) -> KnowledgeVersion:
        """Publish a version held in memory whole (the first version: the pretraining corpus's
        blocks and the embed stage's vectors of them)."""
        def write(writer: VersionWriter) -> int:
            writer.write(table, vectors)
            return next_block_id

        return self.publish_written(write, encoders, extra)

    def publish_written(self, write: Callable[[VersionWriter], int], encoders: dict[str, dict[str, Any]],
                        extra: dict[str, Any]) -> KnowledgeVersion:
        """Write the next version in a temporary folder by `write` (batches of blocks and their
        vectors into a `VersionWriter`; it returns the next free block id), check it, rename it
        into place, then make it current: a reader sees the old version or the new one, never
        half of one, and a failed or stopped write leaves nothing behind."""
        with self.lock():
            number = max(self.versions(), default=0) + 1
            tmp = self.root / f".tmp-{version_name(number)}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir(parents=True)
            try:
                with VersionWriter(tmp, encoders) as writer:
                    next_block_id = write(writer)
                if writer.rows and writer.last_id >= next_block_id:
                    raise ArtifactError(f"{self.root}: knowledge block ids must ascend below {next_block_id}")
                files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir())}
                manifest = {"schema_version": SCHEMA_VERSION, "version": number, "blocks": writer.rows,
                            "documents": len(writer.doc_ids), "next_block_id": next_block_id,
                            "encoders": encoders, "files": files,
                            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
                (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
                os.rename(tmp, self.root / version_name(number))
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self.set_current(number)
            return self.version(number)


class VersionWriter:
    """A new version's files, written a batch at a time into its temporary folder: the blocks
    into `blocks.parquet` (a row group a batch), each tracked encoder's vectors appended to a raw
    file, made a `.npy` when the writer closes. Each batch is checked as it comes (the schema,
    ids ascending, one finite vector a block, one width an encoder), so the texts and vectors in
    memory are one batch's. What grows with the corpus is the set of document ids written (the
    manifest counts them): tens of bytes a document, about 60 MB for a million documents."""

    def __init__(self, folder: Path, encoders: Iterable[str]) -> None:
        self.folder, self.encoders = folder, list(encoders)
        self.rows, self.last_id = 0, -1
        self.doc_ids: set[str] = set()
        self._blocks = pq.ParquetWriter(folder / "blocks.parquet", BLOCK_SCHEMA)
        self._raw = {h: open(folder / f".{h[:16]}.f32", "wb") for h in self.encoders}  # noqa: SIM115
        self._dims: dict[str, int] = {}

    def __enter__(self) -> VersionWriter:
        return self

    def write(self, table: pa.Table, vectors: dict[str, np.ndarray]) -> None:
        if table.schema != BLOCK_SCHEMA:
            raise ArtifactError(f"{self.folder}: knowledge blocks of an unexpected schema")
        if set(vectors) != set(self.encoders):
            raise ArtifactError(f"{self.folder}: vectors of {sorted(h[:16] for h in vectors)} for encoders "
                                f"{sorted(h[:16] for h in self.encoders)}")
        ids = table.column("block_id").to_numpy()
        if len(ids) and (np.any(np.diff(ids) <= 0) or ids[0] <= self.last_id):
            raise ArtifactError(f"{self.folder}: knowledge block ids must ascend")
        for h, v in vectors.items():
            if v.ndim != 2 or v.shape[0] != table.num_rows or not np.isfinite(v).all() or \
                    self._dims.setdefault(h, v.shape[1]) != v.shape[1]:
                raise ArtifactError(f"{self.folder}: vectors of {h[:16]}: {v.shape} for {table.num_rows} blocks, "
                                    "of another width, or not finite")
            self._raw[h].write(np.ascontiguousarray(v, dtype=np.float32).tobytes())
        self._blocks.write_table(table)
        self.rows += table.num_rows
        self.last_id = int(ids[-1]) if len(ids) else self.last_id
        self.doc_ids.update(table.column("doc_id").to_pylist())

    def __exit__(self, kind: Any, *_: Any) -> None:
        self._blocks.close()
        for f in self._raw.values():
            f.close()
        if kind is not None:
            return
        for h in self.encoders:  # the raw rows behind a .npy header, copied a MiB at a time
            raw = self.folder / f".{h[:16]}.f32"
            header = {"descr": "<f4", "fortran_order": False, "shape": (self.rows, self._dims.get(h, 0))}
            with open(self.folder / vectors_file(h), "wb") as out, open(raw, "rb") as src:
                np.lib.format.write_array_header_1_0(out, header)
                shutil.copyfileobj(src, out, 1 << 20)
            raw.unlink()


