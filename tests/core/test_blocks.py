import re
from collections import Counter

from realm_core.blocks import chunk_document, chunk_spans, sentence_starts
from realm_core.config import BUNDLED_ENCODER
from realm_core.encoders import load_tokenizer, load_wordpieces


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
