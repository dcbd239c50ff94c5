"""Chunk documents into REALM blocks: `[CLS] title [SEP] body [SEP]` of at most 288 wordpieces
(REALM §3.4 / ORQA), breaking at sentence ends where possible, else at a word start; never inside
a wordpiece. Consecutive blocks of a document partition its text: joined in order they give the
document back modulo whitespace.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from realm_core.bert import load_tokenizer, load_wordpieces, tokenizer_hash
from realm_core.config import ChunkConfig
from realm_core.errors import ArtifactError, RealmError
from realm_core.progress import NoProgress, Progress
from realm_core.store.artifacts import Artifact, ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version

SPECIAL_TOKENS = 3  # [CLS], [SEP], [SEP]
MIN_BODY = 16
# A document longer than this is tokenized and chunked one segment at a time, each cut at a
# paragraph end (else a line end, else a space): a 5.85 MB page encoded whole peaked at 1.4 GB.
# Blocks still partition the text; a block never spans two segments.
SEGMENT_CHARS = 100_000
# A sentence starts after .!? (and closing quotes/brackets) plus whitespace, or after a newline.
_SENTENCE_START = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)|\n+(?=\S)")



def sentence_starts(text: str) -> list[int]:
    return [m.end() for m in _SENTENCE_START.finditer(text)]


def chunk_spans(offsets: list[tuple[int, int]], word_ids: list[int | None], starts: list[int],
                budget: int, stats: Counter[str]) -> list[tuple[int, int]]:
    """Token ranges [s, e) of at most `budget` tokens each, covering every token in order."""
    n = len(offsets)
    # is_sentence[i]: token i is the first token at or after a sentence start.
    sent_tokens = sorted({bisect.bisect_left(offsets, (c, -1)) for c in starts} - {0, n})
    spans = []
    s = 0
    while s < n:
        limit = s + budget
        if limit >= n:
            spans.append((s, n))
            break
        # largest sentence start in (s, limit]
        j = bisect.bisect_right(sent_tokens, limit) - 1
        if j >= 0 and sent_tokens[j] > s:
            e = sent_tokens[j]
            stats["cut_at_sentence"] += 1
        else:
            e = limit
            while e > s and word_ids[e] == word_ids[e - 1]:
                e -= 1  # back off to the first wordpiece of a word
            if e == s:
                e = limit  # one word longer than a block: cut between its wordpieces
                stats["cut_inside_word"] += 1
            else:
                stats["cut_at_word"] += 1
        spans.append((s, e))
        s = e
    return spans


def segments(text: str, size: int = SEGMENT_CHARS) -> list[tuple[int, int]]:
    """[start, end) character ranges of at most `size` that partition `text`, each ending at a
    paragraph break where one falls in its second half, else a line break, else a space."""
    out, start = [], 0
    while len(text) - start > size:
        limit = start + size
        end = -1
        for sep in ("\n\n", "\n", " "):
            end = text.rfind(sep, start + size // 2, limit)
            if end >= 0:
                end += len(sep)
                break
        end = end if end > start else limit
        out.append((start, end))
        start = end
    out.append((start, len(text)))
    return out


def chunk_document(backend: Any, doc: dict[str, Any], max_wordpieces: int,
                   stats: Counter[str], enc: Any = None,
                   segment_chars: int = SEGMENT_CHARS) -> Iterator[dict[str, Any]]:
    """Blocks of one document, counted with `backend` (`load_wordpieces`); `enc` is the text's
    encoding when the caller batched it. A text longer than `segment_chars` is encoded and
    chunked one `segments` range at a time, so memory is bounded per segment, not per page."""
    text: str = doc["text"]
    title: str = doc["title"]
    title_ids = backend.encode(title, add_special_tokens=False)
    if len(title_ids.ids) > max_wordpieces - SPECIAL_TOKENS - MIN_BODY:
        keep = max_wordpieces - SPECIAL_TOKENS - MIN_BODY
        title = title[: title_ids.offsets[keep - 1][1]]
        title_ids = backend.encode(title, add_special_tokens=False)
        stats["title_truncated"] += 1
    budget = max_wordpieces - SPECIAL_TOKENS - len(title_ids.ids)
    if len(text) > segment_chars:
        stats["segmented_documents"] += 1
        parts = segments(text, segment_chars)
    else:
        parts = [(0, len(text))]
    produced = False
    for base, stop in parts:
        piece = text[base:stop] if len(parts) > 1 else text
        piece_enc = enc if len(parts) == 1 and enc is not None else backend.encode(piece, add_special_tokens=False)
        if not piece_enc.ids:
            continue
        offsets = [tuple(o) for o in piece_enc.offsets]
        spans = chunk_spans(offsets, piece_enc.word_ids, sentence_starts(piece), budget, stats)
        del piece_enc
        for i, (s, e) in enumerate(spans):
            # Blocks partition the text: each runs to where the next one starts.
            start = offsets[s][0] if i else 0  # a segment's first block starts at the segment
            end = offsets[spans[i + 1][0]][0] if i + 1 < len(spans) else len(piece)
            body = piece[start:end]
            lead = len(body) - len(body.lstrip())
            body = body.strip()
            produced = True
            yield {"doc_id": doc["doc_id"], "title": title, "text": body,
                   "n_wordpieces": SPECIAL_TOKENS + len(title_ids.ids) + (e - s),
                   "char_start": base + start + lead, "char_end": base + start + lead + len(body)}
    if not produced:
        stats["empty_documents"] += 1


def run_chunk(store: ArtifactStore, documents: ArtifactRef, config: ChunkConfig,
              progress: Progress | None = None, force: bool = False) -> StageResult:
    progress = progress or NoProgress()
    # the tokenizer files' content, not their path (a location field): a vocabulary changed in
    # place is not served stale blocks, and a moved or copied one finds the same blocks
    inputs = {"documents": documents.content_hash, "tokenizer": tokenizer_hash(config.encoder),
              "code": code_version((__name__,), ("tokenizers",))}
    cache = CachedStage(store, "blocks", config, inputs, force)
    if cache.hit:
        return cache.hit
    docs = store.open(documents, kind="documents")
    tokenizer = load_tokenizer(config.encoder)
    backend = load_wordpieces(config.encoder)
    stats: Counter[str] = Counter()
    next_id = 0
    progress.start("chunk documents", docs.rows("documents"), "docs")
    with cache.write() as out:
        table = out.table("blocks")
        for batch in docs.iter_batches("documents", columns=["doc_id", "title", "text"],
                                       batch_size=config.batch_documents):
            rows = []
            docs_in_batch = batch.to_pylist()
            # long documents are encoded segment by segment inside chunk_document
            encodings = backend.encode_batch(
                [d["text"] if len(d["text"]) <= SEGMENT_CHARS else "" for d in docs_in_batch],
                add_special_tokens=False)
            for doc, enc in zip(docs_in_batch, encodings, strict=True):
                enc = enc if len(doc["text"]) <= SEGMENT_CHARS else None
                for block in chunk_document(backend, doc, config.max_wordpieces, stats, enc):
                    block["block_id"] = next_id
                    next_id += 1
                    rows.append(block)
            if rows:
                table.write(rows)
            stats["documents"] += batch.num_rows
            progress.advance(batch.num_rows)
        progress.finish()
        if next_id == 0:
            raise RealmError(f"{docs.path}: no blocks: every document is empty")
        stats["blocks"] = next_id
        out.extra_manifest["stats"] = dict(stats)
        out.extra_manifest["tokenizer"] = {"encoder": config.encoder, "hash": inputs["tokenizer"],
                                           "vocab_size": tokenizer.vocab_size}
    return cache.result()


def blocks_tokenizer(blocks: Artifact, encoders: Mapping[str, str] | None = None) -> str:
    """The encoder whose tokenizer cut `blocks`, to read their wordpieces again: the first of
    `encoders` (the current config's, by setting name, e.g. `{"chunk.encoder": path}`), then the
    path the blocks record, whose tokenizer files hash to the blocks' own. The recorded path is
    where the tokenizer was when the blocks were cut; it may have moved since (`chunk.encoder` is a
    location field)."""
    recorded = blocks.manifest.get("tokenizer", {})
    if "hash" not in recorded:
        raise ArtifactError(f"{blocks.path}: manifest does not name the tokenizer of its blocks "
                            "(cut before tokenizers were recorded by content: chunk again)")
    candidates = {**(encoders or {}), "the path the blocks record": str(recorded["encoder"])}
    tried: list[str] = []
    for name, spec in candidates.items():
        try:
            if tokenizer_hash(spec) == recorded["hash"]:
                return spec
        except RealmError:  # a directory that is gone or holds no model
            pass
        tried.append(f"{name} {spec!r}")
    raise ArtifactError(f"{blocks.path}: no tokenizer at hand cut these blocks (their tokenizer files "
                        f"hash to {recorded['hash'][:12]}); tried {'; '.join(tried)}: set chunk.encoder "
                        "to the directory that cut them, or chunk again")
