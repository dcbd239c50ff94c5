import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from realm_core.bert import load_tokenizer, load_wordpieces, resolve_encoder_dir
from realm_core.blocks import (
    blocks_tokenizer,
    chunk_document,
    chunk_spans,
    run_chunk,
    segments,
    sentence_starts,
)
from realm_core.config import (
    BUNDLED_ENCODER,
    ChunkConfig,
    IngestConfig,
    MaskingConfig,
    SourceSpec,
    SpanConfig,
)
from realm_core.errors import ArtifactError
from realm_core.ingest.stage import run_ingest
from realm_core.spans.masking import iter_examples
from realm_core.spans.mining import run_mine_spans
from realm_core.store.artifacts import ArtifactStore, StageResult


def test_sentence_starts() -> None:
    assert sentence_starts('One. "Two!" Three?\nFour') == [5, 12, 19]


def test_chunk_spans_prefers_sentences_then_words() -> None:
    # 10 tokens; word ids make tokens 3-4 and 6-8 wordpieces of one word each.
    offsets = [(i * 2, i * 2 + 1) for i in range(10)]
    words = [0, 1, 2, 3, 3, 4, 5, 5, 5, 6]
    stats: Counter[str] = Counter()
    # a sentence starts at token 2 (char 4): with budget 4 the first block ends there
    assert chunk_spans(offsets, words, [4], 4, stats) == [(0, 2), (2, 6), (6, 10)]
    assert stats == Counter({"cut_at_sentence": 1, "cut_at_word": 1})
    # no sentence starts: back off to a word start, never splitting word 5 (tokens 6-8)
    assert chunk_spans(offsets, words, [], 7, Counter()) == [(0, 6), (6, 10)]
    # one word longer than the budget is cut between its wordpieces
    assert chunk_spans(offsets, [0] * 10, [], 4, (s := Counter())) == [(0, 4), (4, 8), (8, 10)]
    assert s["cut_inside_word"] == 2


def test_blocks_fit_and_partition_the_text() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    text = " ".join(f"Sentence number {i} talks about antidisestablishmentarianism." for i in range(60))
    doc = {"doc_id": "d:1", "title": "A rather long title", "text": text}
    blocks = list(chunk_document(load_wordpieces(BUNDLED_ENCODER), doc, 64, Counter()))
    assert len(blocks) > 5
    for b in blocks:
        ids = tok(b["title"], b["text"])["input_ids"]
        assert len(ids) == b["n_wordpieces"] <= 64
        assert text[b["char_start"]:b["char_end"]] == b["text"]
        assert b["text"].endswith(".")  # every cut fell at a sentence end here
    assert re.sub(r"\s", "", "".join(b["text"] for b in blocks)) == re.sub(r"\s", "", text)


def test_segments_cut_at_paragraphs_and_partition() -> None:
    text = "aaaa bbbb\n\ncccc dddd\n\neeee"
    assert segments(text, 12) == [(0, 11), (11, 22), (22, 26)]
    assert segments("x" * 25, 10) == [(0, 10), (10, 20), (20, 25)]  # no break: a hard cut
    assert segments("short", 10) == [(0, 5)]


class _CountingBackend:
    """The wordpiece backend, recording the longest text it was asked to encode."""

    def __init__(self) -> None:
        self.backend = load_wordpieces(BUNDLED_ENCODER)
        self.longest = 0

    def encode(self, text: str, add_special_tokens: bool = False) -> object:
        self.longest = max(self.longest, len(text))
        return self.backend.encode(text, add_special_tokens=add_special_tokens)


def test_a_huge_page_is_chunked_segment_by_segment() -> None:
    """A page far longer than a segment is never encoded whole (memory is bounded per
    segment), and its blocks still fit and partition the text."""
    tok = load_tokenizer(BUNDLED_ENCODER)
    paragraphs = [" ".join(f"Paragraph {p} sentence {i} names Zanzibar." for i in range(12)) for p in range(40)]
    text = "\n\n".join(paragraphs)
    doc = {"doc_id": "d:2", "title": "Huge", "text": text}
    counting, stats = _CountingBackend(), Counter()
    blocks = list(chunk_document(counting, doc, 96, stats, segment_chars=2_000))
    assert counting.longest <= 2_000 and stats["segmented_documents"] == 1
    for b in blocks:
        assert len(tok(b["title"], b["text"])["input_ids"]) == b["n_wordpieces"] <= 96
        assert text[b["char_start"]:b["char_end"]] == b["text"]
    assert re.sub(r"\s", "", "".join(b["text"] for b in blocks)) == re.sub(r"\s", "", text)
    assert [b["char_start"] for b in blocks] == sorted(b["char_start"] for b in blocks)


def test_blocks_are_cut_again_when_the_tokenizer_changes_in_place(tmp_path: Path) -> None:
    """The chunk stage's key holds the tokenizer files' content, not only their path: a
    vocabulary edited in place (here: cased) is not served the blocks the old one cut."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": 1, "title": "Words", "text": "Antidisestablishmentarianism and "
                                  "Floccinaucinihilipilification are long words."}) + "\n")
    tok = tmp_path / "tokenizer"
    shutil.copytree(resolve_encoder_dir(BUNDLED_ENCODER), tok, ignore=shutil.ignore_patterns("*.safetensors"))
    store = ArtifactStore(tmp_path / "art")
    docs = run_ingest(store, IngestConfig(sources=(SourceSpec(kind="jsonl", path=str(corpus)),))).ref
    config = ChunkConfig(encoder=str(tok), max_wordpieces=64)

    def wordpieces(result: StageResult) -> list[int]:
        return list(store.open(result.ref, kind="blocks").read_table("blocks", ["n_wordpieces"]).column(0).to_pylist())

    first = run_chunk(store, docs, config)
    assert run_chunk(store, docs, config).cached
    for name in ("tokenizer_config.json", "tokenizer.json"):  # lowercasing off, in both files
        spec = json.loads((tok / name).read_text())
        spec.get("normalizer", spec)["lowercase" if name == "tokenizer.json" else "do_lower_case"] = False
        (tok / name).write_text(json.dumps(spec))
    load_tokenizer.cache_clear()  # this process's copies; a new process reads the files anyway
    load_wordpieces.cache_clear()
    second = run_chunk(store, docs, config)
    assert not second.cached and second.ref.path != first.ref.path
    # the cased tokenizer reads the capitalised words as [UNK]: the old blocks' counts are wrong for it
    assert wordpieces(second) != wordpieces(first)


def test_a_moved_tokenizer_finds_the_same_blocks_and_reads_them(tmp_path: Path) -> None:
    """`chunk.encoder` is a location: the tokenizer directory moved elsewhere is the same key, and
    the stages that re-read the blocks' wordpieces (spans, masking) find it through the config
    when the path the blocks record is gone, naming what they tried when nothing matches."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": 1, "title": "Curie", "text": "Marie Curie moved to Paris in 1891. "
                                  "She won the Nobel Prize in Physics in 1903."}) + "\n")
    first, moved = tmp_path / "tok-a", tmp_path / "tok-b"
    shutil.copytree(resolve_encoder_dir(BUNDLED_ENCODER), first, ignore=shutil.ignore_patterns("*.safetensors"))
    store = ArtifactStore(tmp_path / "art")
    docs = run_ingest(store, IngestConfig(sources=(SourceSpec(kind="jsonl", path=str(corpus)),))).ref
    cut = run_chunk(store, docs, ChunkConfig(encoder=str(first)))
    first.rename(moved)
    again = run_chunk(store, docs, ChunkConfig(encoder=str(moved)))
    assert again.cached and again.ref.path == cut.ref.path
    blocks = store.open(again.ref, kind="blocks")
    assert blocks.manifest["tokenizer"]["encoder"] == str(first)  # where it was when they were cut
    found = blocks_tokenizer(blocks, {"chunk.encoder": str(moved)})
    assert found == str(moved)
    with pytest.raises(ArtifactError, match=f"no tokenizer at hand cut these blocks.*{re.escape(str(first))}"):
        run_mine_spans(store, again.ref, SpanConfig(n_process=1))
    spans = run_mine_spans(store, again.ref, SpanConfig(n_process=1), encoder=str(moved))
    assert {s["text"] for s in store.open(spans.ref).read_table("salient_spans").to_pylist()} >= {"Marie Curie", "1891"}
    examples = list(iter_examples(blocks, store.open(spans.ref), MaskingConfig(query_length=32),
                                  load_tokenizer(str(moved)), encoder=found))
    assert examples and all(e.block_id == 0 for e in examples)
    # a tokenizer that would cut other wordpieces (cased) is not taken for the blocks'
    cased = tmp_path / "cased"
    shutil.copytree(moved, cased)
    spec = json.loads((cased / "tokenizer_config.json").read_text())
    (cased / "tokenizer_config.json").write_text(json.dumps({**spec, "do_lower_case": False}))
    shutil.rmtree(moved)
    with pytest.raises(ArtifactError, match=re.escape(f"tried chunk.encoder {str(cased)!r}; the path the blocks "
                                                      f"record {str(first)!r}")):
        blocks_tokenizer(blocks, {"chunk.encoder": str(cased)})
