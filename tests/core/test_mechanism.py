"""The mechanism experiment's corpus and measurements (experiments/mechanism.py), and the
collapse watch on retrieval utility (realm_core/pretrain/loop.py), on hand-made inputs."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import torch
from mechanism import (
    CITIES,
    fact_examples,
    gold_block_recall,
    gold_blocks,
    make_corpus,
    prior_accuracy,
)

from realm_core.config import PretrainConfig
from realm_core.pretrain.batches import BlockTexts
from realm_core.pretrain.heldout import is_heldout
from realm_core.pretrain.schedule import first_trained_step, retriever_learns_at, utility_below_zero
from realm_core.spans.masking import MaskedExample


def test_the_corpus_is_a_function_of_its_seed() -> None:
    a, b, c = make_corpus(60, 20, 7, 4), make_corpus(60, 20, 7, 4), make_corpus(60, 20, 8, 4)
    assert a == b
    assert a.documents != c.documents
    assert len(a.documents) == 2 * 60 + 20
    assert len({d["id"] for d in a.documents}) == len(a.documents)


def test_held_out_entities_fall_on_the_held_out_side_of_pretraining() -> None:
    corpus = make_corpus(80, 10, 0, 4)
    assert sum(e.heldout for e in corpus.entities) == 20
    for e in corpus.entities:
        # both documents on the entity's side of the stage's own rule: its sentences never train
        assert [is_heldout(f"synthetic:{d}", 4) for d in e.doc_ids] == [e.heldout, e.heldout]
    distractors = [d for d in corpus.documents if d["id"].startswith("d")]
    assert len(distractors) == 10
    assert not any(re.search(r"\b1[89]\d\d\b", d["text"]) or any(c in d["text"] for c in CITIES)
                   for d in distractors)


def test_each_document_states_its_entitys_facts_and_names_share_pieces() -> None:
    corpus = make_corpus(200, 0, 1, 4)
    by_id = {d["id"]: d for d in corpus.documents}
    for e in corpus.entities:
        for d in e.doc_ids:
            text = by_id[d]["text"]
            assert e.city in text and str(e.year) in text and e.job in text
            assert text.count(e.name) == 3
    partner = corpus.partner()
    assert all(partner[partner[k]] == k != partner[k] for k in partner)
    firsts = {e.name.split()[0] for e in corpus.entities}
    assert len(firsts) < len(corpus.entities) / 5  # every first name is shared by several entities


class _Tokenizer:
    """Wordpieces as the characters' codes (enough for `fact_examples`)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(ch) for ch in text]}


def _example(targets: list[int], doc: str, block: int = 0, query: list[int] | None = None) -> MaskedExample:
    return MaskedExample(query or [101, 103, 102], [1] * len(targets), targets, block, doc, 0)


def test_fact_examples_and_the_prior() -> None:
    corpus = make_corpus(4, 0, 0, 4)
    e = corpus.entities[0]
    doc = f"synthetic:{e.doc_ids[0]}"
    tok = _Tokenizer()
    city, year, name = ([ord(c) for c in s] for s in (e.city, str(e.year), e.name.split()[0]))
    examples = [_example(city, doc), _example(year, doc), _example(name, doc), _example(city, "other:x")]
    assert fact_examples(examples, corpus, tok) == [True, True, False, False]
    # the prior: the most frequent training answer of the held-out example's wordpiece length
    train = [_example([5, 6], "a"), _example([5, 6], "b"), _example([7, 8], "c"), _example([9], "d")]
    held = [_example([5, 6], "e"), _example([7, 8], "f"), _example([9], "g"), _example([1, 2, 3], "h")]
    assert prior_accuracy(train, held) == 2 / 4


def _blocks(docs: list[str]) -> BlockTexts:
    return BlockTexts.from_table(pa.table({"block_id": list(range(len(docs))), "doc_id": docs,
                                           "title": [f"t{i}" for i in range(len(docs))],
                                           "text": ["x"] * len(docs)}))


class _OneHot(torch.nn.Module):
    """A query encoder that embeds a query as the one-hot vector of its second wordpiece."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(input_ids[:, 1], 4).float()


def test_gold_block_recall_drops_the_querys_own_block() -> None:
    blocks = _blocks(["s:a", "s:b", "s:c", "s:d"])
    gold = gold_blocks([_example([1], "s:a", 0), _example([1], "s:c", 2)], blocks,
                       {"s:a": "s:b", "s:b": "s:a", "s:c": "s:d", "s:d": "s:c"})
    assert gold.tolist() == [1, 3]
    vectors = np.eye(4, dtype=np.float32)  # (N, D): block z is the z-th axis
    vectors[0] += vectors[1] * 0.5         # block 0 also points a little at block 1's axis
    # query 1 points at block 1 (its gold); query 2 at block 2, its own block (trivial, dropped):
    # the next best is block 0, not its gold block 3
    examples = [_example([1], "s:a", 0, [101, 1, 102]), _example([1], "s:c", 2, [101, 2, 102])]
    assert gold_block_recall(_OneHot(), vectors, examples, gold, blocks, 0, "block", k=1) == 0.5
    assert gold_block_recall(_OneHot(), vectors, examples, gold, blocks, 0, "block", k=3) == 1.0


def test_utility_below_zero_finds_the_longest_sustained_stretch() -> None:
    values = [0.5] * 5 + [-1.0] * 12 + [0.5] * 5 + [-1.0] * 4 + [1.0] * 4
    steps = [{"step": float(i + 1), "retrieval_utility": v} for i, v in enumerate(values)]
    # the windows of steps 4-7 (mean -0.25) through 16-19 (mean -0.25) are below 0
    assert utility_below_zero(steps, 4) == (4, 19)
    assert utility_below_zero(steps[:3], 4) is None
    assert utility_below_zero([{"step": float(i + 1), "retrieval_utility": 0.1} for i in range(20)], 4) is None
    # a one-step dip inside a window of positive steps is not sustained
    dip = [{"step": float(i + 1), "retrieval_utility": -0.2 if i == 5 else 0.3} for i in range(20)]
    assert utility_below_zero(dip, 4) is None
    assert json.dumps(utility_below_zero(steps, 4))


def test_the_encoders_learn_from_the_frozen_steps_on() -> None:
    """`pretrain.retriever_frozen_steps`: no gradient into the encoders in the first steps, one at
    every step after them (a function of the step alone: a resumed run agrees); the step they
    first trained at is read back from the logged rows."""
    cfg = PretrainConfig(retriever_frozen_steps=2)
    assert not retriever_learns_at(0, cfg) and not retriever_learns_at(1, cfg)

    def rows(trained_from: int | None) -> list[dict[str, float]]:
        return [{"step": float(i + 1), "retriever_trained": float(trained_from is not None and i >= trained_from)}
                for i in range(7)]

    assert first_trained_step(rows(5), 2) == 5
    assert first_trained_step(rows(None), 2) is None
    assert retriever_learns_at(2, cfg) and retriever_learns_at(900, cfg)
    # under freeze_retriever: never
    assert not retriever_learns_at(9, cfg.model_copy(update={"freeze_retriever": True}))
    # rows written before the column: trained past the frozen steps
    assert first_trained_step([{"step": float(i + 1)} for i in range(5)], 2) == 2
