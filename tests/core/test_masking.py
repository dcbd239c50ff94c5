import random
from collections import Counter

from realm_core.config import MaskingConfig
from realm_core.spans.masking import (
    RandomSpanMasking,
    RandomTokenMasking,
    SalientSpanMasking,
    Sentence,
    mask_sentence,
)

CLS, SEP, MASK = 101, 102, 103


def sentence(n: int = 20, spans: list[tuple[int, int]] | None = None) -> Sentence:
    ids = list(range(1000, 1000 + n))
    starts = [i % 2 == 0 for i in range(n)]  # words of two wordpieces
    return Sentence(ids, starts, spans if spans is not None else [(4, 7)], 7, "d:1", 3)


def test_salient_span_masks_one_whole_span() -> None:
    cfg = MaskingConfig(strategy="salient_span", query_length=32)
    ex = mask_sentence(sentence(), SalientSpanMasking(10), cfg, CLS, SEP, MASK, Counter())
    assert ex is not None
    assert ex.input_ids[0] == CLS and ex.input_ids[-1] == SEP
    assert ex.masked_positions == [5, 6, 7]  # span (4, 7) shifted by [CLS]
    assert ex.targets == [1004, 1005, 1006]
    assert [ex.input_ids[p] for p in ex.masked_positions] == [MASK] * 3
    assert (ex.block_id, ex.doc_id, ex.sentence) == (7, "d:1", 3)


def test_salient_span_skips_spans_longer_than_the_cap() -> None:
    stats: Counter[str] = Counter()
    cfg = MaskingConfig(strategy="salient_span", query_length=64, max_mask_tokens=10)
    ex = mask_sentence(sentence(30, [(2, 14)]), SalientSpanMasking(10), cfg, CLS, SEP, MASK, stats)
    assert ex is None and stats["sentences_skipped"] == 1


def test_examples_are_deterministic_per_seed() -> None:
    cfg = MaskingConfig(strategy="random_token", query_length=64, seed=5)
    a = mask_sentence(sentence(40), RandomTokenMasking(0.15), cfg, CLS, SEP, MASK, Counter())
    b = mask_sentence(sentence(40), RandomTokenMasking(0.15), cfg, CLS, SEP, MASK, Counter())
    c = mask_sentence(sentence(40), RandomTokenMasking(0.15), cfg.model_copy(update={"seed": 6}),
                      CLS, SEP, MASK, Counter())
    assert a == b and a is not None and c is not None
    assert len(a.masked_positions) == 6  # 15% of 40
    assert a.masked_positions != c.masked_positions


def test_random_span_masks_whole_words_near_the_rate() -> None:
    s = sentence(80, [])
    positions = RandomSpanMasking(0.15, 0.2, 10).positions(s, random.Random(1))
    assert positions is not None and len(positions) == 12  # 15% of 80
    # every masked run starts at a word start
    runs = [p for p in positions if p - 1 not in positions]
    assert all(s.word_starts[p] for p in runs)


def test_long_sentences_are_windowed_around_a_span() -> None:
    stats: Counter[str] = Counter()
    cfg = MaskingConfig(strategy="salient_span", query_length=16)
    ex = mask_sentence(sentence(60, [(40, 42)]), SalientSpanMasking(10), cfg, CLS, SEP, MASK, stats)
    assert ex is not None and len(ex.input_ids) == 16
    assert ex.targets == [1040, 1041]
    assert stats["sentences_truncated"] == 1
