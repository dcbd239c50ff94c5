"""REALM's mechanism, small (experiments/realm_mechanism.py; docs/experiments/realm-mechanism.md): on
the synthetic corpus, where each masked fact sits in exactly one other block, REALM's reader must
answer held-out facts it cannot answer without retrieval, and REALM's retriever must find the
gold block more often at the end than at the start.

The run starts from a reader that already copies (the warm-up reader copy-trained on the gold
blocks, `--copy-steps`; the retriever starts from the bundled BERT as without it,
`pretrain.fresh_encoder`): learning to copy from scratch takes REALM about 150 steps of 16 at
this size, which the full experiment (`make realm-mechanism`) measures; here the budget goes to
what only REALM's loss does, training the retriever through log p(y|x).

What each assertion catches: a reader that cannot read its block (rows built wrong, the span
mis-placed) reads no more with retrieval than without; a gradient of log p(y|x) that does not
reach the retriever leaves the gold block's recall@1 where it started; a trivial-retrieval
exclusion that let a query retrieve its own sentence's block would teach the retriever that block
(it holds the masked words) instead of the gold one, so recall@1 of the gold block would not
rise; held-out facts that leaked into training would show in the reader without retrieval.

Sized from measurements: see docs/experiments/realm-mechanism.md, "The small run in make test"."""

from __future__ import annotations

from pathlib import Path

import pytest
import realm_mechanism

pytestmark = pytest.mark.slow

ENTITIES, DISTRACTORS, COPY_STEPS = 600, 100, 150
SMALL = ["pretrain.steps=20", "pretrain.retriever_frozen_steps=0", "pretrain.warmup_steps=5",
         "pretrain.refresh_every=10", "pretrain.eval_every=20", "pretrain.eval_examples=400",
         "pretrain.reader_mlm.steps=20", "pretrain.top_k=2", "pretrain.checkpoint_every=10"]


def test_realm_trains_its_retriever_to_find_what_its_reader_copies(shared_data: Path, tmp_path: Path) -> None:
    result = realm_mechanism.run_mechanism(ENTITIES, DISTRACTORS, 0, SMALL, tmp_path, systems=("REALM",),
                                           copy_steps=COPY_STEPS)
    realm = result["systems"]["REALM"]
    unretrieved = result["systems"]["REALM reader, null block"]["heldout_accuracy"]
    prior = result["prior_accuracy"]
    assert result["heldout_examples"] >= 300 and prior < 0.05
    # held-out entities' facts were never trained on: without retrieval the reader stays at the prior
    assert unretrieved <= prior + 0.05
    # with it, the reader copies the fact from the entity's block
    assert realm["heldout_accuracy"] >= unretrieved + 0.15, realm
    # the retriever's gradient moved it: the gold block comes first more often than at the start
    assert realm["recall_at_1_end"] >= realm["recall_at_1_start"] + 0.08, realm
    # and the reader given the gold block does at least as well as REALM's own retrieval
    assert result["systems"]["oracle block"]["heldout_accuracy"] >= realm["heldout_accuracy"] - 0.02
