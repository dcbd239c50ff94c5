"""What the open-QA span reader reads: blocks (the corpus, plus gold passages appended after it),
one reader row `[CLS] question [SEP] title [SEP] body [SEP]` per (question, block), and the gold
spans in each row.

Shapes: B questions, K blocks per question, T tokens, L max span length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from realm_core.answers import has_answer, regex_match, token_string
from realm_core.errors import ConfigError
from realm_core.openqa.span_reader import gold_spans
from realm_core.retrieval.embed import pad_sequences


@dataclass(frozen=True)
class QAQuestion:
    qid: str
    question: str
    answers: tuple[str, ...]
    match: str = "text"          # text | regex (CuratedTREC)
    passage: int | None = None   # BlockStore id of its gold passage (SQuAD's paragraph), if any


class BlockStore:
    """Block titles and bodies, their wordpieces with character offsets (cached on first use)
    and their DPR token strings for answer tests. Ids 0..corpus_size-1 are the corpus blocks;
    gold passages added with `add_passages` come after them and are never retrieved."""

    def __init__(self, titles: list[str], texts: list[str], tokenizer: Any) -> None:
        self.titles, self.texts, self.tokenizer = list(titles), list(texts), tokenizer
        self.corpus_size = len(self.texts)
        self._pieces: dict[int, tuple[list[int], list[int], list[tuple[int, int]]]] = {}
        self._tokens: dict[int, str] = {}
        self._passage_ids: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self.texts)

    def add_passage(self, title: str, text: str) -> int:
        """The id of a gold passage (appended once; the same title and text share an id)."""
        key = (title, text)
        if key not in self._passage_ids:
            self._passage_ids[key] = len(self.texts)
            self.titles.append(title)
            self.texts.append(text)
        return self._passage_ids[key]

    def pieces(self, block: int) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """(title ids, body ids, body character offsets)."""
        if block not in self._pieces:
            title = self.tokenizer(self.titles[block], add_special_tokens=False)["input_ids"]
            body = self.tokenizer(self.texts[block], add_special_tokens=False, return_offsets_mapping=True)
            self._pieces[block] = (title, body["input_ids"], [tuple(o) for o in body["offset_mapping"]])
        return self._pieces[block]

    def tokens(self, block: int) -> str:
        if block not in self._tokens:
            self._tokens[block] = token_string(self.texts[block])
        return self._tokens[block]

    def holds_answer(self, q: QAQuestion, block: int, body_tokens: int | None = None) -> bool:
        """DPR's has_answer on the block text (CuratedTREC: a regex found in it); with
        `body_tokens`, only on the part of the body a reader row kept."""
        if body_tokens is None:
            text, tokens = self.texts[block], None
        else:
            offsets = self.pieces(block)[2]
            if body_tokens >= len(offsets):
                return self.holds_answer(q, block)
            text = self.texts[block][:offsets[body_tokens - 1][1]] if body_tokens > 0 else ""
            tokens = token_string(text)
        if q.match == "regex":
            return regex_match(q.answers, text)
        return has_answer(q.answers, tokens if tokens is not None else self.tokens(block))


@dataclass
class ReaderRows:
    input_ids: torch.Tensor        # (B, K, T)
    attention_mask: torch.Tensor   # (B, K, T)
    token_type_ids: torch.Tensor   # (B, K, T) 0 on [CLS] question [SEP], 1 on the block
    body_mask: torch.Tensor        # (B, K, T) True on block-body tokens
    body_start: list[list[int]]    # (B, K) row position of the first body token
    body_len: list[list[int]]      # (B, K) body tokens kept
    truncated: int                 # rows whose body was cut to fit reader_length


def reader_rows(question_ids: list[list[int]], block_ids: np.ndarray, blocks: BlockStore,
                reader_length: int, sep_id: int, pad_id: int) -> ReaderRows:
    """`[CLS] x [SEP] title [SEP] body [SEP]` per (question, block), cut to `reader_length`
    (a length that fits question + block reads every wordpiece; cuts are counted)."""
    b, k = block_ids.shape
    seqs: list[list[int]] = []
    masks: list[list[bool]] = []
    types: list[list[int]] = []
    starts: list[list[int]] = []
    lens: list[list[int]] = []
    truncated = 0
    for q_ids, row in zip(question_ids, block_ids, strict=True):
        starts.append([])
        lens.append([])
        for z in row:
            title, body, _ = blocks.pieces(int(z))
            head = list(q_ids) + title[:max(reader_length - len(q_ids) - 3, 0)] + [sep_id]
            kept = body[:max(reader_length - len(head) - 1, 0)]
            truncated += len(kept) < len(body)
            seqs.append(head + kept + [sep_id])
            masks.append([False] * len(head) + [True] * len(kept) + [False])
            types.append([0] * len(q_ids) + [1] * (len(head) - len(q_ids) + len(kept) + 1))
            starts[-1].append(len(head))
            lens[-1].append(len(kept))
    ids, attention = pad_sequences(seqs, pad_id)  # (B*K, T)
    t = ids.size(1)
    body_mask = torch.zeros((b * k, t), dtype=torch.bool)
    token_types = torch.zeros((b * k, t), dtype=torch.long)
    for i, (m, ty) in enumerate(zip(masks, types, strict=True)):
        body_mask[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
        token_types[i, :len(ty)] = torch.tensor(ty, dtype=torch.long)
    return ReaderRows(ids.view(b, k, t), attention.view(b, k, t), token_types.view(b, k, t),
                      body_mask.view(b, k, t), starts, lens, truncated)


def gold_row_lengths(questions: list[QAQuestion], blocks: BlockStore, tokenizer: Any, question_length: int,
                     reader_length: int) -> list[int]:
    """Each question's reader row on its gold passage, in wordpieces (`reader_rows`' layout, cut
    to `reader_length`): the length a gold-paragraph batch pads to its longest of."""
    without = [q.qid for q in questions if q.passage is None]
    if without:
        raise ConfigError(f"gold_passage.group_by_length groups gold-paragraph rows by length; question "
                          f"{without[0]!r} (and {len(without) - 1} more) has no gold passage")
    q_ids = tokenizer([q.question for q in questions], truncation=True, max_length=question_length,
                      return_attention_mask=False)["input_ids"]
    out = []
    for q, ids in zip(questions, q_ids, strict=True):
        assert q.passage is not None
        title, body, _ = blocks.pieces(q.passage)
        out.append(min(len(ids) + len(title) + len(body) + 2, reader_length))
    return out


def gold_tensor(rows: ReaderRows, answers: list[list[list[int]]], max_span_length: int) -> torch.Tensor:
    """(B, K, T, L) spans whose wordpieces equal an answer's (every occurrence counts)."""
    b, k, t = rows.input_ids.shape
    gold = torch.zeros((b, k, t, max_span_length), dtype=torch.bool)
    for i in range(b):
        for j in range(k):
            gold[i, j] = gold_spans(rows.input_ids[i, j].tolist(), rows.body_mask[i, j].tolist(),
                                    answers[i], max_span_length)
    return gold


def answer_ids(q: QAQuestion, tokenizer: Any) -> list[list[int]]:
    """The wordpieces of each answer (a CuratedTREC regex is not a span to find: none)."""
    if q.match == "regex":
        return []
    return [tokenizer(a, add_special_tokens=False)["input_ids"] for a in q.answers]
