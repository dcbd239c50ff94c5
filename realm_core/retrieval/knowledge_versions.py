"""The knowledge corpus Z, apart from the pretraining corpus X (REALM §4: a system pretrained on
one corpus retrieves from another, and its knowledge can be read, replaced and grown without
training again). A trained system answers from a versioned knowledge corpus beside it:

- documents are added, changed and removed with `update`: only the blocks of new or changed
  documents are cut and embedded, with each tracked document encoder as it is (frozen), and
  every other block keeps its vector;
- each update publishes a whole new version beside the old ones and then switches one pointer
  (`CURRENT`) atomically; older versions stay, and `set_current` rolls back;
- block ids are stable: a block keeps its id in every version that holds it, and the id of a
  removed block is never given to another.

The first version is the pretraining corpus itself (`initial_version`), so a store whose users
never add a document answers as it did.

Layout, under `<artifact root>/knowledge/` (or an exported system's `knowledge/`):

    CURRENT               {"version": N}
    v00000001/            blocks.parquet: block_id, doc_id, source, doc_hash, title, text
                          vectors-<encoder hash>.npy: one row per block, in blocks.parquet's order
                          manifest.json: counts, tracked encoders, each file's size and sha256

Shapes: N blocks of a version, D embedding dim, M the id range (the next free block id).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from realm_core.artifacts import sha256_file
from realm_core.errors import ArtifactError, ConfigError, CorruptArtifactError, RealmError
from realm_core.retrieval.versions import read_pointer

FOLDER = "knowledge"
POINTER = "CURRENT"
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


def version_name(number: int) -> str:
    return f"v{number:08d}"


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


@dataclass
class UpdatePlan:
    """What an update does to the documents of the current version."""

    added: dict[str, str] = field(default_factory=dict)     # new doc ids: their content hash
    changed: dict[str, str] = field(default_factory=dict)   # known doc ids, other content: its hash
    removed: set[str] = field(default_factory=set)          # doc ids dropped
    unchanged: set[str] = field(default_factory=set)        # doc ids given again, same content

    def counts(self) -> dict[str, int]:
        return {"documents_added": len(self.added), "documents_changed": len(self.changed),
                "documents_removed": len(self.removed), "documents_unchanged": len(self.unchanged)}


def listing(documents: Iterable[Document]) -> list[tuple[str, str]]:
    """(doc_id, doc_hash) of each document in order: a `DocumentFiles`' remembered listing, or
    computed from documents in memory."""
    known = getattr(documents, "listing", None)
    if callable(known):
        return list(known())
    return [(d["doc_id"], doc_hash(d["title"], d["text"])) for d in documents]


def plan_update(current: dict[str, tuple[str, str]], documents: Iterable[tuple[str, str]],
                remove_docs: Iterable[str] = (), remove_sources: Iterable[str] = ()) -> UpdatePlan:
    """The plan of `documents` ((doc_id, doc_hash) pairs, `listing`) against `current`
    ({doc_id: (doc_hash, source)}): a document whose id is new is
    added; one whose id is known is unchanged when its content hashes the same, else changed
    (its old blocks give way to the new ones); `remove_docs` and every document of
    `remove_sources` are removed. A document both given and removed is refused. Only ids and
    hashes are kept: the documents are read again, one at a time, to be cut (`update`)."""
    plan = UpdatePlan()
    drop = set(remove_docs) | {d for d, (_, source) in current.items() if source in set(remove_sources)}
    unknown = set(remove_docs) - set(current)
    if unknown:
        raise ConfigError(f"remove: no document {sorted(unknown)[0]!r} in the knowledge corpus")
    seen: set[str] = set()
    for doc_id, h in documents:
        if doc_id in drop:
            raise ConfigError(f"{doc_id}: both given and removed in one update")
        if doc_id in seen:
            continue  # the first of a doc id wins, as ingest does
        seen.add(doc_id)
        if doc_id not in current:
            plan.added[doc_id] = h
        elif current[doc_id][0] == h:
            plan.unchanged.add(doc_id)
        else:
            plan.changed[doc_id] = h
    plan.removed = drop
    return plan


class KnowledgeCorpus:
    """The versions of one knowledge corpus (a local folder)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._holder: int | None = None  # the thread holding the lock through this object
        self._depth = 0

    @classmethod
    def of_store(cls, store: Any) -> KnowledgeCorpus:
        if not store.local:
            raise ConfigError(f"{store.url}: the knowledge corpus needs a local artifact root")
        return cls(Path(store.root) / FOLDER)

    def versions(self) -> list[int]:
        return sorted(int(p.parent.name[1:]) for p in self.root.glob("v*/manifest.json"))

    def current_number(self) -> int | None:
        return read_pointer(self.root / POINTER, "version", "knowledge")

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

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Every change of the corpus (its first version, an add, a removal, a rollback) holds this
        from reading the current pointer to publishing, so that no change is built on a version
        another has replaced: other processes and threads wait. Re-entrant in the thread that
        holds it (an add that makes the first version publishes twice under one hold). Taking
        it, a writer removes what dead writers left (`.tmp-*` folders, pointer temp files)."""
        me = threading.get_ident()
        if self._holder == me:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            self._holder, self._depth = me, 1
            try:
                self._remove_leftovers()
                yield
            finally:
                self._holder, self._depth = None, 0
                fcntl.flock(f, fcntl.LOCK_UN)

    def _remove_leftovers(self) -> None:
        """With the lock held no other writer is mid-publish: every temp folder or pointer file
        here is a dead writer's."""
        for p in [*self.root.glob(".tmp-v*"), *self.root.glob(f".{POINTER}.*")]:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def set_current(self, number: int) -> None:
        """Make version `number` current (also a rollback), under the lock: a rollback waits for
        an add in flight, and the add's version is then the one rolled back from. The pointer file
        is replaced whole."""
        with self.lock():
            self.version(number)  # exists and reads
            tmp = self.root / f".{POINTER}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
            tmp.write_text(json.dumps({"version": number}))
            os.replace(tmp, self.root / POINTER)

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


def initial_version(corpus: KnowledgeCorpus, blocks: pa.Table, documents: pa.Table,
                    vectors: dict[str, np.ndarray], encoders: dict[str, dict[str, Any]],
                    chunking: dict[str, Any]) -> KnowledgeVersion:
    """Version 1: the pretraining corpus's blocks (their ids are the chunk stage's) and their
    vectors by each tracked encoder (the embed stage's); each document's hash from its full text."""
    hashes = {d: doc_hash(t, x) for d, t, x in zip(documents.column("doc_id").to_pylist(),
                                                    documents.column("title").to_pylist(),
                                                    documents.column("text").to_pylist(), strict=True)}
    sources = dict(zip(documents.column("doc_id").to_pylist(), documents.column("source").to_pylist(), strict=True))
    doc_ids = blocks.column("doc_id").to_pylist()
    table = pa.table({"block_id": blocks.column("block_id").cast(pa.int64()), "doc_id": doc_ids,
                      "source": [sources[d] for d in doc_ids], "doc_hash": [hashes[d] for d in doc_ids],
                      "title": blocks.column("title"), "text": blocks.column("text")}, schema=BLOCK_SCHEMA)
    next_id = int(table.column("block_id").to_numpy().max()) + 1 if table.num_rows else 0
    counts = {"documents_added": len(set(doc_ids)), "documents_changed": 0, "documents_removed": 0,
              "documents_unchanged": 0, "blocks_added": table.num_rows, "blocks_removed": 0, "blocks_reused": 0,
              "blocks_embedded": 0}
    return corpus.publish(table, vectors, encoders, next_id,
                          {"parent": None, "counts": counts, "chunking": chunking, "from": "the pretraining corpus"})


def _live(corpus: KnowledgeCorpus, embedders: dict[str, Embed] | None = None) -> KnowledgeVersion:
    """The current version, with an embedder for each encoder it tracks (where `embedders` is
    given): what a new version is made from."""
    current = corpus.current()
    if current is None:
        raise ConfigError(f"{corpus.root}: no knowledge corpus yet (its first version is the pretraining corpus)")
    missing = set(current.encoders) - set(embedders if embedders is not None else current.encoders)
    if missing:
        raise ConfigError(f"no embedder for tracked encoder {sorted(missing)[0][:16]}")
    return current


# new blocks cut, embedded and written at a time: what bounds an update's memory, and how long a
# stop waits (a few seconds of embedding on two cores)
ADD_BATCH_BLOCKS = 256
Stop = Callable[[], bool]  # asked between batches: True ends the update (nothing published)


class Stopped(RealmError):
    """An update was asked to stop (the service shutting down): nothing was published."""


STOP_EVERY_BLOCKS = 32  # blocks embedded between two questions to `stop` (about a second on two cores)


def _embedded(batch: pa.Table, embedders: dict[str, Embed], stop: Stop | None) -> dict[str, np.ndarray]:
    """Each encoder's vectors of `batch`'s blocks; with `stop`, embedded `STOP_EVERY_BLOCKS` at a
    time and `stop` asked before each."""
    titles, texts = batch.column("title").to_pylist(), batch.column("text").to_pylist()
    assert texts, "an empty batch is never embedded"
    step = STOP_EVERY_BLOCKS if stop is not None else len(texts)
    parts: dict[str, list[np.ndarray]] = {h: [] for h in embedders}
    for i in range(0, len(texts), step):
        if stop is not None and stop():
            raise Stopped("the knowledge corpus update was stopped; the live version is unchanged")
        for h, embed in embedders.items():
            parts[h].append(np.asarray(embed(titles[i:i + step], texts[i:i + step]), dtype=np.float32))
    return {h: np.concatenate(p) for h, p in parts.items()}


def update(corpus: KnowledgeCorpus, documents: Iterable[Document], chunk: Callable[[Document], list[Document]],
           embedders: dict[str, Embed], remove_docs: Iterable[str] = (), remove_sources: Iterable[str] = (),
           progress: Callable[[str], None] | None = None, batch_blocks: int = ADD_BATCH_BLOCKS,
           stop: Stop | None = None) -> tuple[KnowledgeVersion, dict[str, int]]:
    """A new version: the current one with `documents` added or changed and the removals made.
    Only the blocks of added and changed documents are embedded (by each tracked encoder's
    `embedders[hash]`); every other block keeps its id and vector. Nothing is published when
    the plan is empty (the same documents given again): the current version is returned.

    `documents` is read twice, one document at a time (a list, or `read_documents`' files): once
    to plan (ids and hashes; a bad file is refused here, before anything is written), once to
    cut the new documents, `batch_blocks` blocks embedded and written at a time. Memory holds
    one batch, whatever the input's size; `stop` is asked between batches."""
    say = progress or (lambda _: None)
    with corpus.lock():
        current = _live(corpus, embedders)
        plan = plan_update(current.documents(), listing(documents), remove_docs, remove_sources)
        live = len(current.block_ids)
        if not (plan.added or plan.changed or plan.removed):
            return current, {**plan.counts(), "blocks_added": 0, "blocks_removed": 0,
                             "blocks_reused": live, "blocks_embedded": 0}
        gone = plan.removed | set(plan.changed)
        todo = {**plan.added, **plan.changed}
        extra: dict[str, Any] = {"parent": current.number, "chunking": current.manifest.get("chunking", {})}

        def write(writer: VersionWriter) -> int:
            kept = 0
            old = {h: current.vectors(h, mmap=True) for h in embedders}  # (N, D) each, mapped
            offset = 0
            for batch in current.batches():
                keep = np.asarray([d not in gone for d in batch.column("doc_id").to_pylist()], dtype=bool)
                writer.write(batch.filter(pa.array(keep)),
                             {h: np.asarray(v[offset:offset + batch.num_rows][keep]) for h, v in old.items()})
                offset, kept = offset + batch.num_rows, kept + int(keep.sum())
            next_id, added = current.id_range, 0
            pending: list[Document] = []

            def flush() -> None:
                nonlocal pending, added
                if pending:
                    new = pa.Table.from_pylist(pending, schema=BLOCK_SCHEMA)
                    writer.write(new, _embedded(new, embedders, stop))
                    added += len(pending)
                    say(f"blocks embedded: {added:,} of new documents ({len(todo):,} documents left)")
                    pending = []

            for doc in documents:
                h = todo.pop(doc["doc_id"], None)  # the first of an id wins, as planned
                if h is None:
                    continue
                if doc_hash(doc["title"], doc["text"]) != h:
                    raise ConfigError(f"{doc.get('source', 'the input')}: document {doc['doc_id']!r} changed "
                                      "while it was being added; add it again")
                for block in chunk(doc):
                    pending.append({"block_id": next_id, "doc_id": doc["doc_id"], "source": doc["source"],
                                    "doc_hash": h, "title": block["title"], "text": block["text"]})
                    next_id += 1
                if len(pending) >= batch_blocks:
                    flush()
            flush()
            if todo:
                raise ConfigError(f"{len(todo)} documents planned were not read again (first: "
                                  f"{next(iter(todo))!r}): the input changed during the add; add it again")
            extra["counts"] = {**plan.counts(), "blocks_added": added, "blocks_removed": live - kept,
                               "blocks_reused": kept, "blocks_embedded": added * len(embedders)}
            return next_id

        say(f"{len(plan.added) + len(plan.changed):,} documents to cut and embed; {len(plan.removed):,} removed")
        version = corpus.publish_written(write, current.encoders, extra)
        return version, dict(extra["counts"])


def _rewritten(corpus: KnowledgeCorpus, current: KnowledgeVersion, keep: dict[str, Embed | None],
               encoders: dict[str, dict[str, Any]], extra: dict[str, Any], stop: Stop | None = None) -> KnowledgeVersion:
    """A new version of the same blocks: each encoder of `keep` embeds every block again
    (an `Embed`) or keeps its vectors (None), a batch at a time."""
    def write(writer: VersionWriter) -> int:
        old = {h: current.vectors(h, mmap=True) for h, e in keep.items() if e is None}
        offset = 0
        for batch in current.batches(ADD_BATCH_BLOCKS):
            fresh = _embedded(batch, {h: e for h, e in keep.items() if e is not None}, stop)
            writer.write(batch, {**fresh, **{h: np.asarray(v[offset:offset + batch.num_rows]) for h, v in old.items()}})
            offset += batch.num_rows
        return current.id_range

    return corpus.publish_written(write, encoders, {"parent": current.number,
                                                    "chunking": current.manifest.get("chunking", {}), **extra})


def track_encoder(corpus: KnowledgeCorpus, encoder_hash: str, entry: dict[str, Any], embed: Embed,
                  stop: Stop | None = None) -> KnowledgeVersion:
    """A new version that also keeps the vectors of one more document encoder (a retriever the
    query side now searches with): every live block embedded by it, once. The blocks and the
    other encoders' vectors are the current version's."""
    with corpus.lock():
        current = _live(corpus)
        if encoder_hash in current.encoders:
            return current
        n = len(current.block_ids)
        keep: dict[str, Embed | None] = {**{h: None for h in current.encoders}, encoder_hash: embed}
        counts = {"documents_added": 0, "documents_changed": 0, "documents_removed": 0, "documents_unchanged": 0,
                  "blocks_added": 0, "blocks_removed": 0, "blocks_reused": n, "blocks_embedded": n}
        return _rewritten(corpus, current, keep, {**current.encoders, encoder_hash: entry},
                          {"counts": counts, "tracked": encoder_hash}, stop)


def reembed(corpus: KnowledgeCorpus, embedders: dict[str, Embed], stop: Stop | None = None) -> KnowledgeVersion:
    """A new version with every live block embedded again by each tracked encoder: the full
    re-index of the knowledge corpus (what an update avoids), same blocks and ids."""
    with corpus.lock():
        current = _live(corpus, embedders)
        n = len(current.block_ids)
        counts = {"documents_added": 0, "documents_changed": 0, "documents_removed": 0, "documents_unchanged": 0,
                  "blocks_added": 0, "blocks_removed": 0, "blocks_reused": 0,
                  "blocks_embedded": n * len(current.encoders)}
        return _rewritten(corpus, current, {h: embedders[h] for h in current.encoders},
                          current.encoders, {"counts": counts, "reembedded": True}, stop)
