"""Ingest stage: corpora -> one `documents` artifact.

The main process streams the dump (bz2 + expat); wikitext cleaning, the costly part, runs in
`workers` processes with a bounded number of batches in flight, so memory stays flat.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from realm_core.artifacts import (
    ArtifactStore,
    StageResult,
    artifact_key,
    code_version,
    sha256_file,
)
from realm_core.config import IngestConfig, SourceSpec, resolve_data_path
from realm_core.errors import RealmError
from realm_core.ingest import corpora
from realm_core.ingest.wikipedia import RawPage, iter_pages
from realm_core.progress import NoProgress, Progress

Document = dict[str, Any]

CODE = ("realm_core.ingest.stage", "realm_core.ingest.wikipedia", "realm_core.ingest.wikitext",
        "realm_core.ingest.corpora")
PACKAGES = ("mwparserfromhell",)

READERS: dict[str, Callable[[Path, str], Iterator[Document]]] = {
    "squad": corpora.read_squad,
    "dpr_json": corpora.read_dpr_json,
    "dpr_tsv": corpora.read_dpr_tsv,
    "jsonl": corpora.read_jsonl,
}



def clean_pages(pages: list[RawPage], source: str, file_name: str) -> list[tuple[str, Document | None]]:
    """Worker: classify and clean a batch of pages. Returns (kind, document or None) per page."""
    from realm_core.ingest.wikitext import clean_wikitext

    out: list[tuple[str, Document | None]] = []
    for page in pages:
        kind = page.kind
        if kind != "article":
            out.append((kind, None))
            continue
        text = clean_wikitext(page.wikitext)
        if not text:
            out.append(("empty_after_cleaning", None))
            continue
        out.append(("article", {
            "doc_id": f"{source}:{page.page_id}", "title": page.title, "text": text,
            "source": source, "source_file": file_name, "page_id": page.page_id,
            "revision_id": page.revision_id}))
    return out


def _batched(items: Iterable[RawPage], n: int) -> Iterator[list[RawPage]]:
    it = iter(items)
    while batch := list(islice(it, n)):
        yield batch


def _wikipedia_documents(path: Path, spec: SourceSpec, config: IngestConfig, stats: Counter[str],
                         progress: Progress) -> Iterator[Document]:
    batches = _batched(iter_pages(path, config.bz2_threads), config.chunk_pages)

    def account(results: list[tuple[str, Document | None]]) -> Iterator[Document]:
        stats["pages"] += len(results)
        progress.advance(len(results))
        for kind, doc in results:
            stats[kind] += 1
            if doc is not None:
                yield doc

    if config.workers == 1:
        for batch in batches:
            yield from account(clean_pages(batch, spec.source_name, path.name))
        return
    # spawn, not fork: the caller may be a threaded Prefect worker.
    with mp.get_context("spawn").Pool(config.workers) as pool:
        pending: deque[Any] = deque()
        for batch in batches:
            pending.append(pool.apply_async(clean_pages, (batch, spec.source_name, path.name)))
            if len(pending) >= 2 * config.workers:  # bounded: the dump is never read ahead far
                yield from account(pending.popleft().get())
        while pending:
            yield from account(pending.popleft().get())


def iter_source_documents(spec: SourceSpec, config: IngestConfig, stats: Counter[str],
                          progress: Progress) -> Iterator[Document]:
    path = resolve_data_path(spec.path)
    if spec.kind == "wikipedia":
        docs = _wikipedia_documents(path, spec, config, stats, progress)
    else:
        docs = READERS[spec.kind](path, spec.source_name)
    for n, doc in enumerate(docs):
        if spec.max_documents is not None and n >= spec.max_documents:
            stats["stopped_at_max_documents"] = spec.max_documents
            break
        if spec.kind != "wikipedia":
            stats["documents_read"] += 1
            if not doc["text"]:
                stats["empty_text"] += 1
                continue
            progress.advance(1)
        yield doc


def input_hashes(config: IngestConfig) -> dict[str, str]:
    hashes = {}
    for i, spec in enumerate(config.sources):
        path = resolve_data_path(spec.path)
        if not path.is_file():
            raise RealmError(f"{path}: source #{i} ({spec.kind}) does not exist"
                             + (" (is REALM_DATA_DIR set?)" if spec.path.startswith("data:") else ""))
        hashes[f"source{i}:{path.name}"] = sha256_file(path)
    return hashes


def run_ingest(store: ArtifactStore, config: IngestConfig, progress: Progress | None = None,
               force: bool = False) -> StageResult:
    progress = progress or NoProgress()
    inputs = input_hashes(config) | {"code": code_version(CODE, PACKAGES)}
    key = artifact_key(config.config_hash(), inputs)
    if not force and (hit := store.lookup("documents", key)) is not None:
        return StageResult(hit.ref, True, hit.manifest.get("stats", {}))
    all_stats: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    with store.write("documents", key, config=config.model_dump(mode="json"),
                     config_hash=config.config_hash(), inputs=inputs, replace=force) as out:
        table = out.table("documents", rows_per_file=config.rows_per_file)
        for i, spec in enumerate(config.sources):
            stats: Counter[str] = Counter()
            unit = "pages" if spec.kind == "wikipedia" else "docs"
            progress.start(f"ingest {Path(spec.path).name}", None, unit)
            buffer: list[Document] = []
            buffered_chars = 0
            for doc in iter_source_documents(spec, config, stats, progress):
                if doc["doc_id"] in seen:
                    stats["duplicate_doc_id"] += 1
                    continue
                seen.add(doc["doc_id"])
                stats["kept"] += 1
                buffer.append(doc)
                buffered_chars += len(doc["text"])
                if buffered_chars >= 4_000_000:  # bounded by text size, not count: flat memory
                    table.write(buffer)
                    buffer, buffered_chars = [], 0
            if buffer:
                table.write(buffer)
            progress.finish()
            all_stats[f"source{i}:{Path(spec.path).name}"] = dict(stats)
        if table.rows == 0:
            raise RealmError("ingest produced no documents from "
                             + ", ".join(str(resolve_data_path(s.path)) for s in config.sources))
        out.extra_manifest["stats"] = all_stats
    ref = store.lookup("documents", key)
    assert ref is not None
    return StageResult(ref.ref, False, all_stats)
