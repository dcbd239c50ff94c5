"""A held-out test of masked salient-span prediction with enough power to tell REALM from its
null-only baseline.

- Held-out articles are whole articles (a hash of the article id, `pretrain.heldout_every`);
  the examples scored are drawn at random over all of their masked spans (`sample_heldout`, a
  function of the seed), not the first ones in block order, which came from a few articles.
- A span is *recoverable* when it occurs in some block that is not a trivial retrieval of its
  query (`SpanLocator`, `recoverable`): only there can retrieval help at all, so the gain is also
  reported on that subset.
- Examples from one article are not independent (one article, one topic, one set of blocks that
  answer), so the interval of a difference between two systems resamples articles, not examples
  (`article_bootstrap`).

Shapes: E held-out examples, C articles, R bootstrap resamples; in `SpanLocator`, P every block's
wordpieces end to end, O the occurrences a lookup narrows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from realm_core.pretrain.batches import BlockTexts
from realm_core.spans.masking import MaskedExample


def is_heldout(doc_id: str, every: int) -> bool:
    """Whether article `doc_id` is held out: one in `every` articles, by a hash of the id."""
    return int(hashlib.sha256(doc_id.encode()).hexdigest()[:8], 16) % every == 0


def split_heldout(examples: Sequence[MaskedExample], every: int, n: int,
                  seed: int) -> tuple[list[MaskedExample], list[MaskedExample]]:
    """(train, held-out): every example of a held-out article is out of training; `n` of them,
    drawn at random by `seed`, are the held-out test."""
    held = [is_heldout(e.doc_id, every) for e in examples]
    train = [e for e, h in zip(examples, held, strict=True) if not h]
    return train, sample_heldout([e for e, h in zip(examples, held, strict=True) if h], n, seed)


def sample_heldout(examples: Sequence[MaskedExample], n: int, seed: int) -> list[MaskedExample]:
    """`n` examples drawn uniformly without replacement (all of them when there are fewer), in
    their original order; the same seed draws the same examples."""
    if n >= len(examples):
        return list(examples)
    picked = np.sort(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))  # (n,)
    return [examples[int(i)] for i in picked]


def masked_runs(example: MaskedExample) -> list[list[int]]:
    """The masked wordpieces as contiguous runs (a salient span is one run)."""
    runs: list[list[int]] = []
    last = -2
    for position, target in sorted(zip(example.masked_positions, example.targets, strict=True)):
        if position == last + 1:
            runs[-1].append(target)
        else:
            runs.append([target])
        last = position
    return runs


class SpanLocator:
    """Which blocks hold a given wordpiece sequence as whole words. Every block's wordpieces lie in
    one array, each block closed by a boundary no wordpiece matches; the positions of each
    wordpiece are grouped once (a stable argsort), so a lookup starts from the occurrences of the
    sequence's first wordpiece and narrows them one wordpiece at a time, in NumPy. Cheap to build
    too: the pretraining loop builds one per example over its retrieved blocks (`span_holders`)."""

    _BOUNDARY = -2  # after each block (the title/body separator of `title_body_wordpieces` is -1)

    def __init__(self, block_wordpieces: Iterable[Sequence[int]], continuation_ids: set[int]) -> None:
        rows = [np.asarray([*ids, self._BOUNDARY], dtype=np.int64) for ids in block_wordpieces]
        self.tokens = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)  # (P,)
        self.block_of = np.repeat(np.arange(len(rows)), [len(r) for r in rows])  # (P,)
        self.order = np.argsort(self.tokens, kind="stable")  # (P,) positions grouped by wordpiece
        self.sorted_tokens = self.tokens[self.order]  # (P,)
        self.continuation = continuation_ids

    def blocks_with(self, wordpieces: Sequence[int]) -> set[int]:
        """Blocks in which `wordpieces` occur and are not followed by a word's continuation
        (`york` is not found in `york ##shire`); the first wordpiece of a salient span starts a
        word, so the match starts at a word boundary too."""
        if not len(wordpieces):
            return set()
        first = int(wordpieces[0])
        lo, hi = np.searchsorted(self.sorted_tokens, [first, first + 1])
        at = self.order[lo:hi]  # (O,) positions of the first wordpiece
        n, last = len(wordpieces), len(self.tokens) - 1
        for j in range(1, n):
            at = at[at + j <= last]
            at = at[self.tokens[at + j] == int(wordpieces[j])]
        at = at[at + n <= last]  # a block always ends in its boundary, so a match has a follower
        return {int(self.block_of[a]) for a in at.tolist() if int(self.tokens[a + n]) not in self.continuation}


def continuation_ids(tokenizer: Any) -> set[int]:
    """The wordpieces that continue a word (`##...`)."""
    return {i for token, i in tokenizer.get_vocab().items() if token.startswith("##")}


def title_body_wordpieces(blocks: BlockTexts, tokenizer: Any) -> list[list[int]]:
    """Each block's title and body wordpieces, with a separator no span can match between them."""
    titles = tokenizer(blocks.titles.to_pylist(), add_special_tokens=False)["input_ids"]
    bodies = tokenizer(blocks.texts.to_pylist(), add_special_tokens=False)["input_ids"]
    return [[*t, -1, *b] for t, b in zip(titles, bodies, strict=True)]


def allowed(z: int, example: MaskedExample, blocks: BlockTexts, exclusion: str) -> bool:
    """Whether block `z` may be retrieved for `example` (the rule `retrieve_candidates` applies)."""
    own_doc, own_title = blocks.doc_ids[example.block_id], blocks.title_keys[example.block_id]
    if exclusion == "article":
        return bool(blocks.doc_ids[z] != own_doc and blocks.title_keys[z] != own_title)
    return bool(z != example.block_id and (blocks.doc_ids[z] == own_doc or blocks.title_keys[z] != own_title))


def recoverable(example: MaskedExample, locator: SpanLocator, blocks: BlockTexts, exclusion: str = "block") -> bool:
    """True when one block that is not a trivial retrieval holds every masked run of the example."""
    runs = masked_runs(example)
    holders = set.intersection(*(locator.blocks_with(run) for run in runs)) if runs else set()
    return any(allowed(z, example, blocks, exclusion) for z in holders)


def span_holders(examples: Sequence[MaskedExample], input_ids: np.ndarray, block_mask: np.ndarray,
                 continuation: set[int]) -> np.ndarray:
    """(B, K) True at each retrieved block that, as the reader reads it (the part of its row after
    the masked query), holds every masked run of the example as whole words: a block the span could
    be copied from. Slot 0 (the null block) and empty slots never hold.

    input_ids: (B, K, T) reader rows; block_mask: (B, K)."""
    out = np.zeros(block_mask.shape, dtype=bool)
    for b, ex in enumerate(examples):
        slots = [k for k in range(1, input_ids.shape[1]) if block_mask[b, k]]
        runs = masked_runs(ex)
        if slots and runs:
            locator = SpanLocator([input_ids[b, k, len(ex.input_ids):].tolist() for k in slots], continuation)
            for row in set.intersection(*(locator.blocks_with(run) for run in runs)):
                out[b, slots[row]] = True
    return out


def answer_retrieved(examples: Sequence[MaskedExample], input_ids: np.ndarray, block_mask: np.ndarray,
                     continuation: set[int]) -> np.ndarray:
    """(B,) True where one of the example's retrieved blocks holds its span (`span_holders`). Read
    beside span accuracy it tells a retriever that does not bring the answer from a reader that
    does not copy it."""
    return np.asarray(span_holders(examples, input_ids, block_mask, continuation).any(axis=1))


def article_bootstrap(a: Sequence[float], b: Sequence[float], articles: Sequence[str], resamples: int = 10_000,
                      seed: int = 0) -> tuple[float, float, float]:
    """(delta, lo, hi): mean(a) - mean(b) over the same examples, and its 95% percentile interval
    from resampling whole articles with replacement (each resample's delta is the example mean
    over the articles drawn, so big articles weigh as much as their examples)."""
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)  # (E,) per-example difference
    if x.size == 0:
        raise ValueError("article_bootstrap needs at least one example")
    names, cluster = np.unique(np.asarray(articles, dtype=object), return_inverse=True)
    sums = np.bincount(cluster, weights=x, minlength=len(names))  # (C,)
    counts = np.bincount(cluster, minlength=len(names)).astype(np.float64)  # (C,)
    draws = np.random.default_rng(seed).integers(0, len(names), size=(resamples, len(names)))  # (R, C)
    deltas = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)  # (R,)
    lo, hi = np.percentile(deltas, [2.5, 97.5])
    return float(x.mean()), float(lo), float(hi)
