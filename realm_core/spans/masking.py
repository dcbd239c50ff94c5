"""Masking strategies for REALM pretraining examples, behind one interface.

An example is one block sentence as a query `[CLS] sentence [SEP]` (at most `query_length`
wordpieces) with some wordpieces replaced by [MASK]. It keeps its block and document ids so
that retrieval can exclude the query's own article (REALM §3.4, trivial retrievals).

- salient_span (REALM): one salient span of the sentence, all its wordpieces masked.
- random_token (BERT): 15% of wordpieces.
- random_span (SpanBERT): contiguous whole-word spans, lengths ~ Geometric(0.2) clipped at 10,
  until 15% of wordpieces are masked.
REALM Table 2 compares the three (38.2 vs 32.3 vs 35.3 NQ EM).

Shapes: T tokens.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from realm_core.bert import load_wordpieces
from realm_core.blocks import blocks_tokenizer
from realm_core.config import MaskingConfig


@dataclass(frozen=True)
class MaskedExample:
    input_ids: list[int]         # (T,) [CLS] masked sentence [SEP]
    masked_positions: list[int]  # positions in input_ids that hold [MASK]
    targets: list[int]           # the original wordpiece ids there
    block_id: int
    doc_id: str
    sentence: int


@dataclass(frozen=True)
class Sentence:
    """A block sentence in wordpieces, with its salient spans (wordpiece ranges within it)."""

    ids: list[int]
    word_starts: list[bool]            # True where a wordpiece begins a word
    spans: list[tuple[int, int]]
    block_id: int
    doc_id: str
    sentence: int


class MaskingStrategy(Protocol):
    def positions(self, sentence: Sentence, rng: random.Random) -> list[int] | None:
        """Positions (into sentence.ids) to mask, or None to skip this sentence."""


class SalientSpanMasking:
    def __init__(self, max_mask_tokens: int) -> None:
        self.max_mask_tokens = max_mask_tokens

    def positions(self, sentence: Sentence, rng: random.Random) -> list[int] | None:
        usable = [(a, b) for a, b in sentence.spans if 0 < b - a <= self.max_mask_tokens]
        if not usable:
            return None
        a, b = rng.choice(usable)
        return list(range(a, b))


class RandomTokenMasking:
    def __init__(self, rate: float) -> None:
        self.rate = rate

    def positions(self, sentence: Sentence, rng: random.Random) -> list[int] | None:
        n = len(sentence.ids)
        k = max(1, round(n * self.rate))
        return sorted(rng.sample(range(n), k))


class RandomSpanMasking:
    def __init__(self, rate: float, p: float, max_len: int) -> None:
        self.rate, self.p, self.max_len = rate, p, max_len

    def _length(self, rng: random.Random) -> int:
        length = 1
        while rng.random() > self.p and length < self.max_len:
            length += 1
        return length

    def positions(self, sentence: Sentence, rng: random.Random) -> list[int] | None:
        n = len(sentence.ids)
        budget = max(1, round(n * self.rate))
        word_starts = [i for i, s in enumerate(sentence.word_starts) if s]
        chosen: set[int] = set()
        for _ in range(4 * n):
            if len(chosen) >= budget or not word_starts:
                break
            start = rng.choice(word_starts)
            end = start
            words = self._length(rng)
            while end < n and words:  # extend over whole words
                end += 1
                if end == n or sentence.word_starts[end]:
                    words -= 1
            span = set(range(start, min(end, start + budget - len(chosen))))
            if span & chosen:
                continue
            chosen |= span
        return sorted(chosen) or None


def strategy_for(config: MaskingConfig) -> MaskingStrategy:
    if config.strategy == "salient_span":
        return SalientSpanMasking(config.max_mask_tokens)
    if config.strategy == "random_token":
        return RandomTokenMasking(config.mask_rate)
    return RandomSpanMasking(config.mask_rate, config.span_geometric_p, config.max_mask_tokens)


def sentence_rng(seed: int, block_id: int, sentence: int) -> random.Random:
    """Deterministic per sentence: the same example whatever order or shard it is built in."""
    return random.Random(f"{seed}:{block_id}:{sentence}")


def mask_sentence(sentence: Sentence, strategy: MaskingStrategy, config: MaskingConfig,
                  cls_id: int, sep_id: int, mask_id: int, stats: Counter[str]) -> MaskedExample | None:
    rng = sentence_rng(config.seed, sentence.block_id, sentence.sentence)
    room = config.query_length - 2
    ids, spans = sentence.ids, sentence.spans
    offset = 0
    if len(ids) > room:
        # keep a window that contains one salient span, if there is one
        anchor = rng.choice(spans)[0] if spans else 0
        offset = max(0, min(anchor - room // 2, len(ids) - room))
        ids = ids[offset:offset + room]
        spans = [(a - offset, b - offset) for a, b in spans if a >= offset and b <= offset + room]
        stats["sentences_truncated"] += 1
    window = Sentence(ids, sentence.word_starts[offset:offset + room], spans, sentence.block_id,
                      sentence.doc_id, sentence.sentence)
    positions = strategy.positions(window, rng)
    if not positions:
        stats["sentences_skipped"] += 1
        return None
    input_ids = [cls_id, *ids, sep_id]
    targets = [input_ids[p + 1] for p in positions]
    for p in positions:
        input_ids[p + 1] = mask_id
    stats["examples"] += 1
    stats["masked_wordpieces"] += len(positions)
    return MaskedExample(input_ids, [p + 1 for p in positions], targets, sentence.block_id,
                         sentence.doc_id, sentence.sentence)


def block_sentences(block: dict[str, Any], sentences: list[dict[str, Any]],
                    spans: list[dict[str, Any]], encoding: Any) -> Iterator[Sentence]:
    """Sentences of one block in wordpieces, from its text encoding and the mined spans."""
    offsets = encoding.offsets
    word_ids = encoding.word_ids
    ends = [o[1] for o in offsets]

    for s in sentences:
        a = bisect.bisect_right(ends, s["char_start"])
        b = a
        while b < len(offsets) and offsets[b][0] < s["char_end"]:
            b += 1
        if b <= a:
            continue
        ids = encoding.ids[a:b]
        starts = [i == a or word_ids[i] != word_ids[i - 1] for i in range(a, b)]
        own = [(p["wp_start"] - a, p["wp_end"] - a) for p in spans
               if p["sentence"] == s["sentence"] and a <= p["wp_start"] and p["wp_end"] <= b]
        yield Sentence(ids, starts, own, block["block_id"], block["doc_id"], s["sentence"])


def iter_examples(blocks: Any, spans: Any, config: MaskingConfig, tokenizer: Any,
                  stats: Counter[str] | None = None, encoder: str | None = None) -> Iterator[MaskedExample]:
    """Masked examples from a blocks artifact and its salient_spans artifact, in block order.
    The spans' wordpiece offsets are re-read with the tokenizer that cut the blocks: `encoder`, as
    `blocks_tokenizer` found it (default: the path the blocks record).

    Salient-span masking uses the sentences that hold a usable span; the random strategies use
    the same sentences, so that Table 2's ablations differ only in what is masked.
    """
    stats = stats if stats is not None else Counter()
    strategy = strategy_for(config)
    vocab = tokenizer.get_vocab()
    cls_id, sep_id, mask_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
    sent_df = spans.read_table("sentences").to_pandas()
    span_df = spans.read_table("salient_spans").to_pandas()
    sent_by_block = {k: g.to_dict("records") for k, g in sent_df.groupby("block_id")}
    span_by_block = {k: g.to_dict("records") for k, g in span_df.groupby("block_id")}
    backend = load_wordpieces(encoder or blocks_tokenizer(blocks))
    for batch in blocks.iter_batches("blocks", columns=["block_id", "doc_id", "text"]):
        for block in batch.to_pylist():
            own_spans = span_by_block.get(block["block_id"], [])
            if not own_spans:
                continue
            enc = backend.encode(block["text"], add_special_tokens=False)
            for sentence in block_sentences(block, sent_by_block.get(block["block_id"], []),
                                            own_spans, enc):
                if not sentence.spans:
                    continue
                example = mask_sentence(sentence, strategy, config, cls_id, sep_id, mask_id, stats)
                if example is not None:
                    yield example
