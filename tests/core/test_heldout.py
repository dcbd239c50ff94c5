"""The held-out test's parts: random sampling over held-out articles, the recoverable-span rule
on a toy corpus, and the bootstrap over articles on tables whose answer is known."""

import numpy as np
import pyarrow as pa
import pytest

from realm_core.openqa.significance import paired_bootstrap
from realm_core.pretrain.batches import BlockTexts
from realm_core.pretrain.heldout import (
    SpanLocator,
    answer_retrieved,
    article_bootstrap,
    masked_runs,
    recoverable,
    sample_heldout,
    span_holders,
    split_heldout,
)
from realm_core.spans.masking import MaskedExample


def _example(doc: str, block: int, positions: list[int], targets: list[int], sentence: int = 0) -> MaskedExample:
    return MaskedExample([101, *range(1000, 1010), 102], positions, targets, block, doc, sentence)


def test_split_leaves_whole_articles_out_and_samples_at_random_by_seed() -> None:
    examples = [_example(f"wiki:{d}", d, [1], [7], s) for d in range(200) for s in range(10)]
    train, held = split_heldout(examples, every=5, n=100, seed=0)
    held_docs, train_docs = {e.doc_id for e in held}, {e.doc_id for e in train}
    assert len(held) == 100 and not held_docs & train_docs
    _, all_held = split_heldout(examples, every=5, n=10**6, seed=0)
    assert {e.doc_id for e in all_held}.isdisjoint(train_docs)  # every example of a held-out article is out
    assert len(train) + len(all_held) == len(examples)
    assert len(all_held) == 310 and len(held_docs) > 20  # drawn over the 31 held-out articles
    first_in_order = all_held[:100]
    assert held != first_in_order and len({e.doc_id for e in first_in_order}) == 10  # what block order gave
    assert split_heldout(examples, 5, 100, seed=0)[1] == held
    assert split_heldout(examples, 5, 100, seed=1)[1] != held
    order = {id(e): i for i, e in enumerate(examples)}
    assert [order[id(e)] for e in held] == sorted(order[id(e)] for e in held)


def test_sample_takes_everything_when_asked_for_more() -> None:
    examples = [_example("a", 0, [1], [5]), _example("b", 1, [2], [6])]
    assert sample_heldout(examples, 5, seed=3) == examples


def test_masked_runs_split_at_gaps() -> None:
    assert masked_runs(_example("a", 0, [3, 4, 5], [10, 11, 12])) == [[10, 11, 12]]
    assert masked_runs(_example("a", 0, [7, 2, 3], [30, 10, 11])) == [[10, 11], [30]]


def test_answer_retrieved_looks_only_in_retrieved_blocks_as_the_reader_reads_them() -> None:
    continuation = {99}
    query = [101, 103, 103, 102]  # [CLS] [MASK] [MASK] [SEP]: the span itself is masked out
    ex = MaskedExample(query, [1, 2], [5, 6], 0, "wiki:1", 0)
    two_runs = MaskedExample([101, 103, 7, 103, 102], [1, 3], [5, 8], 0, "wiki:1", 0)

    def rows(*bodies: list[int]) -> np.ndarray:
        width = 12
        out = np.zeros((1, len(bodies), width), dtype=np.int64)  # (B, K, T), 0 = padding
        for k, body in enumerate(bodies):
            row = [*query, *body][:width]
            out[0, k, :len(row)] = row
        return out

    null = [102]  # slot 0: the null block reads [CLS] x [SEP] and nothing else
    held = rows(null, [9, 102, 5, 6, 102], [4, 102, 3, 102])
    on = np.array([[True, True, True]])
    assert answer_retrieved([ex], held, on, continuation).tolist() == [True]
    assert span_holders([ex], held, on, continuation).tolist() == [[False, True, False]]
    off = np.array([[True, False, True]])  # the slot holding the span is empty (excluded)
    assert answer_retrieved([ex], held, off, continuation).tolist() == [False]
    # only the null slot holds it: the null block is never a retrieval
    assert answer_retrieved([ex], rows([5, 6], [4, 102]), on[:, :2], continuation).tolist() == [False]
    # the span's last word goes on (6 ##99): not the same word
    assert answer_retrieved([ex], rows(null, [5, 6, 99, 102]), on[:, :2], continuation).tolist() == [False]
    # two masked runs: one block must hold both
    both = np.zeros((1, 3, 14), dtype=np.int64)
    both[0, 1, 5:10] = [5, 102, 8, 102, 0]
    both[0, 2, 5:8] = [5, 4, 4]
    assert answer_retrieved([two_runs], both, on, continuation).tolist() == [True]
    assert span_holders([two_runs], both, on, continuation).tolist() == [[False, True, False]]
    both[0, 1, 7] = 4
    assert answer_retrieved([two_runs], both, on, continuation).tolist() == [False]


def _blocks(rows: list[tuple[str, str]]) -> BlockTexts:
    table = pa.table({"block_id": list(range(len(rows))), "doc_id": [d for d, _ in rows],
                      "title": [t for _, t in rows], "text": ["" for _ in rows]})
    return BlockTexts.from_table(table)


def test_recoverable_needs_the_span_in_a_block_that_is_not_a_trivial_retrieval() -> None:
    continuation = {99}  # a '##' wordpiece
    # block 0: the query's own; 1: another block of its article; 2: a copy of the article from
    # another corpus (same title); 3: another article; 4: another article, span followed by ##
    blocks = _blocks([("wiki:1", "Warsaw"), ("wiki:1", "Warsaw"), ("squad:1", "Warsaw"), ("wiki:2", "Poland"),
                      ("wiki:3", "Vistula")])
    words = [[5, 6, 7, 8], [1, 2, 3], [5, 6, 7], [4, 4, 9], [5, 6, 99]]
    locator = SpanLocator(words, continuation)
    assert locator.blocks_with([5, 6]) == {0, 2}  # not block 4: there the word goes on (6 ##99)
    assert locator.blocks_with([6, 7]) == {0, 2}
    assert locator.blocks_with([4, 9]) == {3}
    only_own = _example("wiki:1", 0, [1, 2, 3], [6, 7, 8])
    assert not recoverable(only_own, locator, blocks)  # only in the query's own block
    own_copy = _example("wiki:1", 0, [1, 2], [5, 6])
    assert not recoverable(own_copy, locator, blocks)  # and in a copy of its article: trivial too
    same_article = _example("wiki:1", 0, [1, 2, 3], [1, 2, 3])
    assert recoverable(same_article, locator, blocks, "block")  # another block of the article: allowed
    assert not recoverable(same_article, locator, blocks, "article")  # ... unless whole articles are out
    elsewhere = _example("wiki:1", 0, [4, 5], [4, 9])
    assert recoverable(elsewhere, locator, blocks) and recoverable(elsewhere, locator, blocks, "article")
    split = _example("wiki:1", 0, [1, 2, 6], [4, 9, 4])  # two runs, one block holds both
    assert recoverable(split, locator, blocks)
    assert not recoverable(_example("wiki:1", 0, [1, 5], [1, 9]), locator, blocks)  # runs in different blocks


def test_article_bootstrap_on_known_tables() -> None:
    # every article has the same difference: the interval is that point
    a = [1, 1, 0, 1, 0, 0]
    b = [0, 1, 0, 0, 0, 0]
    delta, lo, hi = article_bootstrap([1.0] * 6, [0.0] * 6, ["x", "x", "y", "y", "z", "z"])
    assert (delta, lo, hi) == (1.0, 1.0, 1.0)
    delta, lo, hi = article_bootstrap(a, b, ["x", "x", "y", "y", "z", "z"], seed=0)
    assert delta == pytest.approx(2 / 6) and lo <= delta <= hi
    # the gain sits in one article of twenty: resampling articles sees that, examples do not
    articles = [f"doc{i // 50}" for i in range(1000)]
    a = [1.0 if i < 50 else 0.0 for i in range(1000)]
    b = [0.0] * 1000
    _, lo_art, hi_art = article_bootstrap(a, b, articles)
    _, lo_ex, hi_ex = paired_bootstrap([x > 0 for x in a], [False] * 1000)
    assert lo_art == pytest.approx(0.0) and lo_ex > 0.03  # by articles the gain may be nothing
    assert hi_art - lo_art > 2 * (hi_ex - lo_ex)
    with pytest.raises(ValueError):
        article_bootstrap([], [], [])


def test_article_bootstrap_is_a_function_of_the_seed() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random(300), rng.random(300)
    articles = [f"d{i % 37}" for i in range(300)]
    assert article_bootstrap(a, b, articles, seed=4) == article_bootstrap(a, b, articles, seed=4)
    assert article_bootstrap(a, b, articles, seed=4) != article_bootstrap(a, b, articles, seed=5)


def _blocks_with_by_scanning(blocks: list[list[int]], needle: list[int], continuation: set[int]) -> set[int]:
    """The definition, by brute force: a block holds `needle` where it occurs at some position and
    the wordpiece after it (if any) does not continue a word."""
    found = set()
    for b, ids in enumerate(blocks):
        for i in range(len(ids) - len(needle) + 1):
            if ids[i:i + len(needle)] == needle and (i + len(needle) == len(ids)
                                                      or ids[i + len(needle)] not in continuation):
                found.add(b)
    return found


def test_span_locator_finds_exactly_the_blocks_a_scan_finds() -> None:
    rng = np.random.default_rng(0)
    continuation = {7, 8, 9}  # wordpieces 7-9 continue a word, as `##...` ones do
    # a small vocabulary, so needles recur: in one block, across a block's end, after a separator
    blocks = [[int(w) for w in rng.integers(-1, 10, size=int(rng.integers(0, 30)))] for _ in range(60)]
    locator = SpanLocator(blocks, continuation)
    needles = [[int(w) for w in rng.integers(0, 10, size=int(rng.integers(1, 4)))] for _ in range(300)]
    needles += [[3], [9, 9, 9, 9, 9, 9], [12], [0, 1, 2, 3]]  # a wordpiece no block has; longer than most blocks
    for needle in needles:
        assert locator.blocks_with(needle) == _blocks_with_by_scanning(blocks, needle, continuation), needle
    assert locator.blocks_with([]) == set()
