"""The knowledge corpus of a trained system (REALM §4: Z, apart from the pretraining corpus X),
grown without training again: `realm add` and the `grow-knowledge` flow call `add_documents`.

- The first version is the pretraining corpus (the chunk stage's blocks, the embed stage's
  vectors): created on the first add, so a store nobody adds to answers as it always has.
- The tracked document encoders are those the query side searches with: the current index's
  (`realm search`) and the encoders of the dense systems whose artifacts exist (`ict`, `realm`).
  An encoder tracked later (a new retriever made current by the nightly refresh) embeds every
  block of the corpus once; from then on only new blocks are embedded.
- New documents are read by the ingest readers and cut into blocks by the pretraining corpus's
  own tokenizer and block length; they are all read and checked once before anything is
  written, so a bad file leaves the live version untouched (`error: <file>: ...`, exit 2), then
  read again a document at a time and cut, embedded and written in bounded batches: an add's
  memory does not grow with its input.

Versions, stable block ids and rollback: `realm_core.knowledge.versions`; what a new version
holds: `realm_core.knowledge.update`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realm_core.config import EmbedConfig, IngestConfig, SourceSpec
from realm_core.errors import ConfigError
from realm_core.graph.resolver import Resolver
from realm_core.knowledge.update import initial_version, update
from realm_core.knowledge.versions import Embed, KnowledgeCorpus, KnowledgeVersion
from realm_core.progress import NoProgress, Progress


@dataclass
class Added:
    """What one `add_documents` did."""

    version: int
    previous: int | None
    counts: dict[str, int]
    seconds: float
    encoders: list[str]

    def summary(self) -> str:
        c = self.counts
        return (f"knowledge version {self.version}" + (f" (was {self.previous})" if self.previous else "") + ": "
                f"documents added {c['documents_added']}, changed {c['documents_changed']}, removed "
                f"{c['documents_removed']}, unchanged {c['documents_unchanged']}; blocks added "
                f"{c['blocks_added']:,}, removed {c['blocks_removed']:,}, reused {c['blocks_reused']:,}; "
                f"{self.seconds:.1f} s")


def tracked_encoders(resolver: Resolver) -> dict[str, EmbedConfig]:
    """The document encoders the query side searches with, by content hash: the current
    index's, and each dense searcher's system whose artifacts exist."""
    from realm_core.errors import MissingArtifactError
    from realm_core.graph.stages import qa_system, stage
    from realm_core.query import SEARCHERS
    from realm_core.retrieval.stage import encoder_hash
    from realm_core.retrieval.versions import current_step, encoder_dir, load_index
    from realm_core.store.cache import existing_artifacts_only

    store, cfg = resolver.store, resolver.cfg
    found: dict[str, EmbedConfig] = {}
    if current_step(store) is not None:
        _, art = load_index(store)
        doc = encoder_dir(store, art)
        found[encoder_hash(doc)] = cfg.embed.model_copy(update={"doc_encoder": doc, "encoder_from": "config"})
    for _, system_key in SEARCHERS.values():
        if system_key is None:
            continue
        needs = [u for u in stage(f"finetune_{system_key}").upstream(cfg) if u in ("ict", "pretrain", "reader_mlm")]
        try:
            with existing_artifacts_only():
                refs = {n: resolver.run(n).ref for n in needs}
        except MissingArtifactError:
            continue  # that system was never trained here: nothing to search it with
        system = qa_system(cfg, refs, system_key)
        if system.doc_embed is not None:
            found[encoder_hash(system.doc_embed.doc_encoder)] = system.doc_embed
    return found


def encoder_entry(store: Any, config: EmbedConfig) -> dict[str, Any]:
    """How a tracked encoder is recorded: where it is (store-relative) and its embed settings."""
    return {"spec": store.relative(config.doc_encoder), "embed": config.model_dump(mode="json")}


def first_version(resolver: Resolver, corpus: KnowledgeCorpus, encoders: dict[str, EmbedConfig],
                  progress: Progress) -> KnowledgeVersion:
    """Version 1 from the pretraining corpus: its blocks and, for each encoder, the embed stage's
    vectors of them (through the cache: computed only if that encoder never embedded them)."""
    from realm_core.retrieval.embed import load_embeddings
    from realm_core.retrieval.stage import run_embed_blocks

    store = resolver.store
    blocks_ref, documents_ref = resolver.ref("chunk"), resolver.ref("ingest")
    blocks = store.open(blocks_ref, kind="blocks").read_table("blocks", ["block_id", "doc_id", "title", "text"])
    documents = store.open(documents_ref, kind="documents").read_table("documents", ["doc_id", "title", "text",
                                                                                     "source"])
    vectors = {}
    for h, config in encoders.items():
        emb = store.open(run_embed_blocks(store, blocks_ref, config, progress).ref, kind="embeddings")
        vectors[h] = load_embeddings(Path(emb.path) / "embeddings", emb.manifest["embeddings"], blocks.num_rows)
    chunking = {"encoder": resolver.cfg.chunk.encoder, "max_wordpieces": resolver.cfg.chunk.max_wordpieces}
    return initial_version(corpus, blocks, documents, vectors,
                           {h: encoder_entry(store, c) for h, c in encoders.items()}, chunking)


def source_names(paths: Sequence[str], names: str | Sequence[str] | None) -> list[str]:
    """Each file's source name: none given, each file's name up to its first dot; one, every
    file's; one per file, paired in order (`realm add a.jsonl b.xml --name notes --name enwiki2`)."""
    given = [names] if isinstance(names, str) else list(names or [])
    if not given:
        return [Path(p).name.split(".")[0] for p in paths]
    if len(given) == 1:
        return given * len(paths)
    if len(given) != len(paths):
        raise ConfigError(f"--name given {len(given)} times for {len(paths)} files: expected once for "
                          "every file, or once per file in the files' order")
    return given


class DocumentFiles:
    """The documents of files in one format, each tagged with its source name
    (`source_names`): read by the ingest readers one document at a time, every time they are
    iterated, so that an add of any size holds one document and one batch of blocks. `listing`
    reads them all once first (a bad file raises the reader's InputError naming it, before
    anything is written) and keeps each document's id and content hash."""

    def __init__(self, paths: Sequence[str], kind: str, names: str | Sequence[str] | None,
                 ingest: IngestConfig) -> None:
        self.specs = [SourceSpec(kind=kind, path=str(Path(path).resolve()), name=name)
                      for path, name in zip(paths, source_names(paths, names), strict=True)]
        self.ingest = ingest
        self.stats: Counter[str] = Counter()  # the last full reading's (documents read, dropped and why)
        self._listing: list[tuple[str, str]] | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from realm_core.ingest.stage import iter_source_documents

        stats: Counter[str] = Counter()
        for spec in self.specs:
            for doc in iter_source_documents(spec, self.ingest, stats, NoProgress()):
                yield {"doc_id": doc["doc_id"], "title": doc["title"], "text": doc["text"],
                       "source": spec.source_name}
        self.stats = stats

    def listing(self, stop: Callable[[], bool] | None = None) -> list[tuple[str, str]]:
        """(doc_id, doc_hash) of every document, in order: read once, then remembered (what the
        update plans from; the texts are read again per batch). This grows with the input, about
        100 bytes a document: 0.1 GB for a million documents, against the texts' gigabytes."""
        from realm_core.knowledge.update import Stopped
        from realm_core.knowledge.versions import doc_hash

        if self._listing is None:
            listing = []
            for doc in self:
                if stop is not None and stop():
                    raise Stopped("the knowledge corpus update was stopped; the live version is unchanged")
                listing.append((doc["doc_id"], doc_hash(doc["title"], doc["text"])))
            self._listing = listing
        return self._listing


def read_documents(paths: Sequence[str], kind: str, names: str | Sequence[str] | None,
                   ingest: IngestConfig) -> DocumentFiles:
    """The documents of the files (`DocumentFiles`), every one read and checked once before
    this returns: a bad file raises the ingest reader's InputError naming it."""
    documents = DocumentFiles(paths, kind, names, ingest)
    documents.listing()
    return documents


def chunker(resolver: Resolver) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Blocks of a new document as the chunk stage cuts them: the pretraining blocks' tokenizer
    (found as spans and pretraining find it) and `chunk.max_wordpieces`."""
    from realm_core.bert import load_wordpieces
    from realm_core.blocks import blocks_tokenizer, chunk_document

    blocks = resolver.store.open(resolver.ref("chunk"), kind="blocks")
    backend = load_wordpieces(blocks_tokenizer(blocks, {"chunk.encoder": resolver.cfg.chunk.encoder}))
    stats: Counter[str] = Counter()
    max_wordpieces = resolver.cfg.chunk.max_wordpieces
    return lambda doc: list(chunk_document(backend, doc, max_wordpieces, stats))


# the files of a folder that each format reads
PATTERNS = {"jsonl": ("*.jsonl",), "wikipedia": ("*.xml", "*.xml.bz2"), "squad": ("*.json",),
            "dpr_json": ("*.json",), "dpr_tsv": ("*.tsv",)}


def folder_files(folder: str | Path, kind: str) -> list[Path]:
    """The files of `folder` in format `kind`, by name (the nightly flow's documents)."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"{path}: expected a folder of documents")
    if kind not in PATTERNS:
        raise ConfigError(f"kind {kind!r}: expected one of {', '.join(PATTERNS)}")
    return sorted({f for pattern in PATTERNS[kind] for f in path.glob(pattern) if f.is_file()})


def vanished_sources(corpus: KnowledgeCorpus, files: Sequence[Path]) -> list[str]:
    """Sources added to the corpus after its first version whose file is no longer among `files`
    (a source is named after its file): what a folder sync removes."""
    current = corpus.current()
    if current is None:
        return []
    pretraining = set(corpus.version(min(corpus.versions())).table.column("source").to_pylist())
    present = {f.name.split(".")[0] for f in files}
    return sorted(set(current.table.column("source").to_pylist()) - pretraining - present)


def grow(corpus: KnowledgeCorpus, documents: Iterable[dict[str, Any]], chunk: Callable[[dict[str, Any]], list[dict[str, Any]]],
         tracked: dict[str, tuple[dict[str, Any], Embed]], remove_docs: Sequence[str] = (),
         remove_sources: Sequence[str] = (), reembed_all: bool = False,
         log: Callable[[str], None] | None = None,
         stop: Callable[[], bool] | None = None) -> tuple[KnowledgeVersion, dict[str, int]]:
    """The update itself, for a store's corpus or an exported system's alike: every encoder of
    `tracked` ({hash: (its record, its embedder)}) kept current (one new to the corpus embeds
    every block once), then the documents added and the removals made (only new blocks embedded),
    then, with `reembed_all`, every block embedded again."""
    from realm_core.knowledge.update import reembed, track_encoder

    say = log or (lambda _: None)
    current = corpus.current()
    if current is None:
        raise ConfigError(f"{corpus.root}: no knowledge corpus yet")
    embedders = {h: embed for h, (_, embed) in tracked.items()}
    for h, (entry, embed) in tracked.items():
        if h not in current.encoders:  # a retriever new to this corpus: every block, once
            say(f"tracking document encoder {entry['spec']}: embedding the corpus's {len(current.block_ids):,} "
                "blocks once")
            current = track_encoder(corpus, h, entry, embed, stop)
    missing = set(current.encoders) - set(embedders)
    if missing:
        raise ConfigError(f"{corpus.root}: no embedder for tracked encoder {sorted(missing)[0][:16]}")
    version, counts = update(corpus, documents, chunk, embedders, remove_docs, remove_sources, say, stop=stop)
    if reembed_all:
        say(f"re-embedding all {len(version.block_ids):,} blocks")
        version = reembed(corpus, embedders, stop)
        counts = {**counts, "blocks_embedded": counts["blocks_embedded"] + version.manifest["counts"]["blocks_embedded"]}
    return version, counts


def add_documents(resolver: Resolver, paths: Sequence[str] = (), kind: str = "jsonl",
                  name: str | Sequence[str] | None = None,
                  remove_docs: Sequence[str] = (), remove_sources: Sequence[str] = (),
                  progress: Progress | None = None, log: Callable[[str], None] | None = None,
                  reembed_all: bool = False, stop: Callable[[], bool] | None = None) -> Added:
    """Grow (or shrink) the knowledge corpus of `resolver`'s store and publish a new version;
    `reembed_all` then embeds every block again (a full re-index of the corpus)."""

    say = log or (lambda _: None)
    progress = progress or NoProgress()
    t0 = time.perf_counter()
    documents = DocumentFiles(paths, kind, name, resolver.cfg.ingest)
    documents.listing(stop)  # every document read and checked once before anything is written
    corpus = KnowledgeCorpus.of_store(resolver.store)
    wanted = tracked_encoders(resolver)
    if not wanted:
        raise ConfigError(f"{resolver.store.root}: no index and no trained retriever to embed new blocks with; "
                          "run the pipeline first (`make demo` or `realm pipeline`)")
    # one hold from reading the pointer to publishing: a first version made once, never beside
    # another writer's, and the version this add is built on is the one it replaces
    with corpus.lock():
        previous = corpus.current_number()
        if previous is None:
            say("knowledge corpus: its first version is the pretraining corpus")
            first_version(resolver, corpus, wanted, progress)
        current = corpus.current()
        assert current is not None
        # the encoders searched with now, and any the corpus tracked before (kept current too)
        configs = dict(wanted)
        for h, entry in current.encoders.items():
            configs.setdefault(h, EmbedConfig.model_validate({**entry["embed"],
                                                              "doc_encoder": resolver.store.resolve(entry["spec"])}))
        tracked = {h: (encoder_entry(resolver.store, c), block_embedder(c)) for h, c in configs.items()}
        version, counts = grow(corpus, documents, chunker(resolver), tracked, remove_docs, remove_sources,
                               reembed_all, say, stop)
    return Added(version.number, previous, counts, time.perf_counter() - t0, sorted(tracked))


def block_embedder(config: EmbedConfig) -> Embed:
    """(titles, texts) -> (n, D) vectors by `config.doc_encoder`, loaded once, with the settings
    the embed stage (`run_embed_blocks`) embeds a whole corpus with (head, length, batch, device,
    precision): the knowledge corpus embeds only its new blocks with it, and their vectors are the
    full run's."""
    import numpy as np

    from realm_core.bert import load_tokenizer
    from realm_core.distributed import resolve_device
    from realm_core.errors import RealmError
    from realm_core.retrieval.embed import embed_texts, tokenizer_parallel_for
    from realm_core.retrieval.encoders import RetrieverEncoder

    tokenizer = load_tokenizer(config.doc_encoder)
    encoder = RetrieverEncoder.from_pretrained(config.doc_encoder, config.projection_dim,
                                               config.pooling, config.seed, config.normalize)
    device = resolve_device(config.device)
    encoder.to(device)
    parallel = tokenizer_parallel_for(config.tokenizer_parallel, device)

    def embed(titles: list[str], texts: list[str]) -> np.ndarray:
        vectors = embed_texts(encoder, tokenizer, titles, texts, config.max_length, config.batch_size,
                              precision=config.precision, tokenizer_parallel=parallel)
        if not np.isfinite(vectors).all():
            raise RealmError(f"{config.doc_encoder}: the encoder produced NaN/inf embeddings")
        return vectors

    return embed
