"""What goes into a knowledge corpus's next version: the first version (the pretraining corpus),
an update (documents added, changed and removed: only new or changed documents' blocks cut and
embedded, a bounded batch at a time), and a newly tracked encoder's vectors of every block.
Each is published by `KnowledgeCorpus.publish_written` under the corpus's lock.

Shapes: N blocks of a version, D embedding dim, M the id range (the next free block id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from realm_core.errors import ConfigError, RealmError
from realm_core.knowledge.versions import (
    BLOCK_SCHEMA,
    Document,
    Embed,
    KnowledgeCorpus,
    KnowledgeVersion,
    VersionWriter,
    doc_hash,
)


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
