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
from realm_core.errors import ArtifactError, ConfigError, CorruptArtifactError
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

    def vectors(self, encoder_hash: str, dense: bool = False) -> np.ndarray:
        """(N, D) the live blocks' vectors by the encoder of `encoder_hash`, in `block_ids` order;
        `dense`: (M, D), rows by block id, zero where no live block has the id."""
        if encoder_hash not in self.encoders:
            raise ConfigError(f"{self.path}: no vectors of document encoder {encoder_hash[:16]}; this "
                              f"knowledge corpus tracks {', '.join(h[:16] for h in self.encoders) or 'none'} "
                              "(`realm add` embeds with the encoders of the current index and the systems)")
        path = self.check(vectors_file(encoder_hash))
        try:
            rows: np.ndarray = np.load(path, allow_pickle=False)
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

    added: list[Document] = field(default_factory=list)     # new doc ids
    changed: list[Document] = field(default_factory=list)   # known doc ids, other content
    removed: set[str] = field(default_factory=set)          # doc ids dropped
    unchanged: set[str] = field(default_factory=set)        # doc ids given again, same content

    def counts(self) -> dict[str, int]:
        return {"documents_added": len(self.added), "documents_changed": len(self.changed),
                "documents_removed": len(self.removed), "documents_unchanged": len(self.unchanged)}


def plan_update(current: dict[str, tuple[str, str]], documents: Iterable[Document],
                remove_docs: Iterable[str] = (), remove_sources: Iterable[str] = ()) -> UpdatePlan:
    """The plan against `current` ({doc_id: (doc_hash, source)}): a document whose id is new is
    added; one whose id is known is unchanged when its content hashes the same, else changed
    (its old blocks give way to the new ones); `remove_docs` and every document of
    `remove_sources` are removed. A document both given and removed is refused."""
    plan = UpdatePlan()
    drop = set(remove_docs) | {d for d, (_, source) in current.items() if source in set(remove_sources)}
    unknown = set(remove_docs) - set(current)
    if unknown:
        raise ConfigError(f"remove: no document {sorted(unknown)[0]!r} in the knowledge corpus")
    seen: set[str] = set()
    for doc in documents:
        doc_id = doc["doc_id"]
        if doc_id in drop:
            raise ConfigError(f"{doc_id}: both given and removed in one update")
        if doc_id in seen:
            continue  # the first of a doc id wins, as ingest does
        seen.add(doc_id)
        h = doc_hash(doc["title"], doc["text"])
        if doc_id not in current:
            plan.added.append({**doc, "doc_hash": h})
        elif current[doc_id][0] == h:
            plan.unchanged.add(doc_id)
        else:
            plan.changed.append({**doc, "doc_hash": h})
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
        """Write the next version in a temporary folder, check it, rename it into place, then make
        it current: a reader sees the old version or the new one, never half of one."""
        if table.schema != BLOCK_SCHEMA:
            raise ArtifactError(f"{self.root}: knowledge blocks of an unexpected schema")
        ids = table.column("block_id").to_numpy()
        if len(ids) and (np.any(np.diff(ids) <= 0) or ids[-1] >= next_block_id):
            raise ArtifactError(f"{self.root}: knowledge block ids must ascend below {next_block_id}")
        for h, v in vectors.items():
            if v.shape[0] != table.num_rows or not np.isfinite(v).all():
                raise ArtifactError(f"{self.root}: vectors of {h[:16]}: {v.shape[0]} rows for {table.num_rows} "
                                    "blocks, or not finite")
        with self.lock():
            return self._publish(table, vectors, encoders, next_block_id, extra)

    def _publish(self, table: pa.Table, vectors: dict[str, np.ndarray], encoders: dict[str, dict[str, Any]],
                 next_block_id: int, extra: dict[str, Any]) -> KnowledgeVersion:
        number = max(self.versions(), default=0) + 1
        tmp = self.root / f".tmp-{version_name(number)}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            pq.write_table(table, tmp / "blocks.parquet")
            for h, v in vectors.items():
                np.save(tmp / vectors_file(h), v.astype(np.float32), allow_pickle=False)
            files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir())}
            manifest = {"schema_version": SCHEMA_VERSION, "version": number, "blocks": table.num_rows,
                        "documents": len(set(table.column("doc_id").to_pylist())), "next_block_id": next_block_id,
                        "encoders": encoders, "files": files,
                        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
            os.rename(tmp, self.root / version_name(number))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.set_current(number)
        return self.version(number)


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


def update(corpus: KnowledgeCorpus, documents: list[Document], chunk: Callable[[Document], list[Document]],
           embedders: dict[str, Embed], remove_docs: Iterable[str] = (), remove_sources: Iterable[str] = (),
           progress: Callable[[str], None] | None = None) -> tuple[KnowledgeVersion, dict[str, int]]:
    """A new version: the current one with `documents` added or changed and the removals made.
    Only the blocks of added and changed documents are embedded (by each tracked encoder's
    `embedders[hash]`); every other block keeps its id and vector. Nothing is published when
    the plan is empty (the same documents given again): the current version is returned."""
    say = progress or (lambda _: None)
    with corpus.lock():
        current = _live(corpus, embedders)
        t = current.table
        by_doc = {d: (h, s) for d, h, s in zip(t.column("doc_id").to_pylist(), t.column("doc_hash").to_pylist(),
                                               t.column("source").to_pylist(), strict=True)}
        plan = plan_update(by_doc, documents, remove_docs, remove_sources)
        if not (plan.added or plan.changed or plan.removed):
            return current, {**plan.counts(), "blocks_added": 0, "blocks_removed": 0,
                             "blocks_reused": t.num_rows, "blocks_embedded": 0}
        gone = plan.removed | {d["doc_id"] for d in plan.changed}
        keep = np.asarray([d not in gone for d in t.column("doc_id").to_pylist()], dtype=bool)  # (N,)
        new_rows: list[Document] = []
        next_id = current.id_range
        for doc in [*plan.added, *plan.changed]:
            for block in chunk(doc):
                new_rows.append({"block_id": next_id, "doc_id": doc["doc_id"], "source": doc["source"],
                                 "doc_hash": doc["doc_hash"], "title": block["title"], "text": block["text"]})
                next_id += 1
        new = pa.Table.from_pylist(new_rows, schema=BLOCK_SCHEMA)
        table = pa.concat_tables([t.filter(pa.array(keep)), new])  # ids ascend: new ones are past every old one
        say(f"{len(new_rows):,} new blocks to embed; {int(keep.sum()):,} kept")
        vectors = {}
        for h, embed in embedders.items():
            old = current.vectors(h)[keep]  # (kept, D)
            fresh = embed(new.column("title").to_pylist(), new.column("text").to_pylist()) if new_rows else \
                np.zeros((0, old.shape[1]), dtype=np.float32)
            vectors[h] = np.concatenate([old, fresh.astype(np.float32)])
        counts = {**plan.counts(), "blocks_added": len(new_rows), "blocks_removed": int((~keep).sum()),
                  "blocks_reused": int(keep.sum()), "blocks_embedded": len(new_rows) * len(embedders)}
        version = corpus.publish(table, vectors, current.encoders, next_id,
                                 {"parent": current.number, "counts": counts,
                                  "chunking": current.manifest.get("chunking", {})})
        return version, counts


def track_encoder(corpus: KnowledgeCorpus, encoder_hash: str, entry: dict[str, Any], embed: Embed) -> KnowledgeVersion:
    """A new version that also keeps the vectors of one more document encoder (a retriever the
    query side now searches with): every live block embedded by it, once. The blocks and the
    other encoders' vectors are the current version's."""
    with corpus.lock():
        current = _live(corpus)
        if encoder_hash in current.encoders:
            return current
        t = current.table
        vectors = {h: current.vectors(h) for h in current.encoders}
        vectors[encoder_hash] = embed(t.column("title").to_pylist(), t.column("text").to_pylist())
        counts = {"documents_added": 0, "documents_changed": 0, "documents_removed": 0, "documents_unchanged": 0,
                  "blocks_added": 0, "blocks_removed": 0, "blocks_reused": t.num_rows, "blocks_embedded": t.num_rows}
        return corpus.publish(t, vectors, {**current.encoders, encoder_hash: entry}, current.id_range,
                              {"parent": current.number, "counts": counts, "tracked": encoder_hash,
                               "chunking": current.manifest.get("chunking", {})})


def reembed(corpus: KnowledgeCorpus, embedders: dict[str, Embed]) -> KnowledgeVersion:
    """A new version with every live block embedded again by each tracked encoder: the full
    re-index of the knowledge corpus (what an update avoids), same blocks and ids."""
    with corpus.lock():
        current = _live(corpus, embedders)
        t = current.table
        titles, texts = t.column("title").to_pylist(), t.column("text").to_pylist()
        vectors = {h: embedders[h](titles, texts) for h in current.encoders}
        counts = {"documents_added": 0, "documents_changed": 0, "documents_removed": 0, "documents_unchanged": 0,
                  "blocks_added": 0, "blocks_removed": 0, "blocks_reused": 0,
                  "blocks_embedded": t.num_rows * len(vectors)}
        return corpus.publish(t, vectors, current.encoders, current.id_range,
                              {"parent": current.number, "counts": counts, "reembedded": True,
                               "chunking": current.manifest.get("chunking", {})})
