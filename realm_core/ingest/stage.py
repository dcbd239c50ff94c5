"""Ingest stage: corpora -> one `documents` artifact.

The main process streams the dump (bz2 + expat); wikitext cleaning, the costly part, runs in
`workers` processes with a bounded number of batches in flight, so memory stays flat.

Beyond one machine the unit of work is a source file (Wikipedia publishes its dump as dozens of
`pages-articles<N>.xml-p<first>p<last>.bz2` parts): `map_sources` runs one `SourceJob` per file
wherever it likes (Dask workers, `flows/fanout.py`), each writing its documents to a Parquet
file in the stage's scratch directory, and the stage appends them in source order, dropping a
doc id an earlier source already had, exactly as one process would.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from realm_core.config import IngestConfig, SourceSpec, resolve_data_path
from realm_core.errors import RealmError, check_input_file
from realm_core.ingest import corpora
from realm_core.ingest.wikipedia import RawPage, iter_pages
from realm_core.jobs import in_job_order
from realm_core.progress import NoProgress, Progress
from realm_core.store.artifacts import ArtifactStore, StageResult, sha256_file
from realm_core.store.cache import CachedStage, code_version
from realm_core.store.schemas import DOCUMENTS

Document = dict[str, Any]

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
    batches = _batched(iter_pages(path, config.bz2_threads, config.max_record_bytes), config.chunk_pages)

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
    elif spec.kind == "jsonl":  # read a line at a time, each bounded
        docs = corpora.read_jsonl(path, spec.source_name, config.max_record_bytes)
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
        if spec.path.startswith("data:") and not path.exists():
            raise RealmError(f"{path}: source #{i} ({spec.kind}) does not exist (is REALM_DATA_DIR set?)")
        check_input_file(path, f"a {spec.kind} source file (source #{i})")
        hashes[f"source{i}:{path.name}"] = sha256_file(path)
    return hashes


def first_seen(docs: Iterable[Document], seen: set[str], stats: Counter[str]) -> Iterator[Document]:
    """Documents whose doc id has not been seen yet; the others are counted as duplicates."""
    for doc in docs:
        if doc["doc_id"] in seen:
            stats["duplicate_doc_id"] += 1
            continue
        seen.add(doc["doc_id"])
        stats["kept"] += 1
        yield doc


def _buffered(docs: Iterable[Document], max_chars: int = 4_000_000) -> Iterator[list[Document]]:
    """Lists of documents bounded by text size, not count: flat memory."""
    buffer: list[Document] = []
    chars = 0
    for doc in docs:
        buffer.append(doc)
        chars += len(doc["text"])
        if chars >= max_chars:
            yield buffer
            buffer, chars = [], 0
    if buffer:
        yield buffer


@dataclass(frozen=True)
class SourceJob:
    """One source file to ingest in whatever process runs `ingest_source` (a Dask worker);
    picklable. Its documents go to `file`, which the worker must be able to write."""

    number: int
    spec: SourceSpec
    config: IngestConfig
    directory: str

    @property
    def file(self) -> Path:
        return Path(self.directory) / f"source-{self.number:05d}.parquet"


def ingest_source(job: SourceJob) -> dict[str, Any]:
    """Ingest one source into its Parquet file (duplicates within it dropped); its counts.
    Wikitext is cleaned in this process: Dask's worker processes are daemons and may not start
    a pool of their own, and the cluster is the parallelism."""
    stats: Counter[str] = Counter()
    config = job.config.model_copy(update={"workers": 1})
    job.file.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(job.file, DOCUMENTS.schema, compression="zstd") as writer:
        for batch in _buffered(first_seen(iter_source_documents(job.spec, config, stats, NoProgress()), set(), stats)):
            writer.write_table(pa.Table.from_pylist(batch, schema=DOCUMENTS.schema))
    return {"number": job.number, "stats": dict(stats)}


# Runs the jobs wherever it likes and yields their results in job order, each as it is ready.
SourceMap = Callable[[list[SourceJob]], Iterable[dict[str, Any]]]


def _sources_in_order(jobs: list[SourceJob], results: Iterable[dict[str, Any]], seen: set[str],
                      progress: Progress) -> Iterator[tuple[Counter[str], Iterator[Document]]]:
    """(counts, documents not seen in an earlier source) of each source as its job is done."""
    for job, result in in_job_order(jobs, results, "ingested sources"):
        stats: Counter[str] = Counter(result["stats"])
        del stats["kept"]  # recounted against the sources before this one (Counter: no KeyError)
        try:
            parquet = pq.ParquetFile(job.file)
        except OSError as e:
            raise RealmError(f"{job.file}: ingested documents of {job.spec.path} are missing or unreadable ({e})") from e

        def docs(parquet: pq.ParquetFile = parquet, path: Path = job.file) -> Iterator[Document]:
            yield from (doc for batch in parquet.iter_batches() for doc in batch.to_pylist())
            path.unlink()

        progress.advance(1)
        yield stats, first_seen(docs(), seen, stats)


def run_ingest(store: ArtifactStore, config: IngestConfig, progress: Progress | None = None,
               force: bool = False, map_sources: SourceMap | None = None) -> StageResult:
    """Ingest every source (cached). `map_sources` ingests the source files elsewhere (Dask
    workers), one job per file; the documents and counts are those of one process."""
    progress = progress or NoProgress()
    inputs = input_hashes(config) | {"code": code_version((__name__,), PACKAGES)}
    cache = CachedStage(store, "documents", config, inputs, force)
    if cache.hit:
        return cache.hit
    all_stats: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    names = [f"source{i}:{Path(spec.path).name}" for i, spec in enumerate(config.sources)]
    with cache.write() as out:
        table = out.table("documents", rows_per_file=config.rows_per_file)
        if map_sources is not None:
            jobs = [SourceJob(i, spec, config, str(out.tmp / "_sources")) for i, spec in enumerate(config.sources)]
            progress.start(f"ingest {len(jobs)} sources", len(jobs), "sources")
            for name, (stats, docs) in zip(names, _sources_in_order(jobs, map_sources(jobs), seen, progress),
                                           strict=False):
                for batch in _buffered(docs):
                    table.write(batch)
                all_stats[name] = dict(stats)
            progress.finish()
            (out.tmp / "_sources").rmdir()  # emptied as each source was appended
        else:
            for name, spec in zip(names, config.sources, strict=True):
                counts: Counter[str] = Counter()
                progress.start(f"ingest {Path(spec.path).name}", None,
                               "pages" if spec.kind == "wikipedia" else "docs")
                for batch in _buffered(first_seen(iter_source_documents(spec, config, counts, progress), seen,
                                                  counts)):
                    table.write(batch)
                progress.finish()
                all_stats[name] = dict(counts)
        if table.rows == 0:
            raise RealmError("ingest produced no documents from "
                             + ", ".join(str(resolve_data_path(s.path)) for s in config.sources))
        out.extra_manifest["stats"] = all_stats
    return cache.result()
