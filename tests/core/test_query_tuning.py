"""ORQA's early update (`finetune.query_phase`): the loss against a hand-computed example, that
the phase raises the rank of answer-holding blocks on a toy corpus with the block embeddings
frozen, that it keeps the starting weights when training does not beat them on dev, and exact
resume after a kill."""

import math
from pathlib import Path

import pytest
import torch

from realm_core.config import QueryBudget
from realm_core.openqa.query_tuning import dev_recall, early_update_loss, train_query_encoder
from tests.core.test_finetune import QUESTIONS, _setup
from tests.killing import KillAfter, Killed


def test_early_update_loss_by_hand() -> None:
    q = torch.tensor([[1.0, 0.0]])
    candidates = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])  # scores 1, 0, -1
    z = math.e + 1 + 1 / math.e
    one = early_update_loss(q, candidates, torch.tensor([[False, True, False]]))
    assert one.item() == pytest.approx(math.log(z), abs=1e-6)  # -log(e^0 / z)
    two = early_update_loss(q, candidates, torch.tensor([[True, True, False]]))
    assert two.item() == pytest.approx(-math.log((math.e + 1) / z), abs=1e-6)
    none = early_update_loss(q, candidates, torch.tensor([[False, False, False]]))
    assert math.isinf(none.item())  # left out by the caller, never a NaN in the mean


def _budget(**kw: object) -> QueryBudget:
    return QueryBudget(**({"steps": 30, "batch_size": 4, "learning_rate": 3e-3, "candidates": 6} | kw))


def test_the_phase_ranks_answer_holding_blocks_first_with_the_blocks_frozen(tiny_bert: str, tmp_path: Path) -> None:
    models, retriever, blocks, _ = _setup(tiny_bert, "dense")
    retriever.top_k = 2  # half the questions hold their answer in the top 2 before
    vectors = retriever.vectors.clone()
    before = dev_recall(retriever, QUESTIONS, blocks)
    curves = train_query_encoder(retriever, QUESTIONS, blocks, _budget(), 0.0, 1.0, tmp_path)
    losses = [r["loss"] for r in curves.steps]
    assert sum(losses[-5:]) < sum(losses[:5])
    assert dev_recall(retriever, QUESTIONS, blocks) == 1.0 > before
    assert torch.equal(retriever.vectors, vectors)
    assert retriever.query_encoder is models.query_encoder  # trained in place
    assert sum(r["no_positive"] for r in curves.steps) == 0  # every question's block is among the 6


def test_the_starting_weights_are_kept_when_training_does_not_beat_them(tiny_bert: str, tmp_path: Path) -> None:
    _, retriever, blocks, _ = _setup(tiny_bert, "dense")
    start = {k: v.clone() for k, v in retriever.query_encoder.state_dict().items()}
    # dev questions whose answers no block holds: recall 0 before and after, so no evaluation beats step 0
    dev = [q.__class__(f"d{i}", q.question, ("Atlantis",)) for i, q in enumerate(QUESTIONS)]
    curves = train_query_encoder(retriever, QUESTIONS, blocks, _budget(steps=6, eval_every=2, patience=2), 0.0, 1.0,
                                 tmp_path, dev)
    assert (curves.dev_recall_before, curves.best_dev_recall, curves.best_step) == (0.0, 0.0, 0)
    assert curves.stopped_early and len(curves.steps) == 4
    for k, v in retriever.query_encoder.state_dict().items():
        assert torch.equal(v, start[k]), k


def test_a_killed_phase_resumes_to_the_same_parameters(tiny_bert: str, tmp_path: Path) -> None:
    budget = _budget(steps=6, eval_every=3)
    _, retriever, blocks, _ = _setup(tiny_bert, "dense")
    train_query_encoder(retriever, QUESTIONS, blocks, budget, 0.01, 1.0, tmp_path / "straight", QUESTIONS,
                        checkpoint_every=2)
    straight = {k: v.clone() for k, v in retriever.query_encoder.state_dict().items()}
    _, retriever, blocks, _ = _setup(tiny_bert, "dense")
    with pytest.raises(Killed):  # after step 5, before its evaluation: resumes from step 4
        train_query_encoder(retriever, QUESTIONS, blocks, budget, 0.01, 1.0, tmp_path / "killed", QUESTIONS,
                            KillAfter(5), checkpoint_every=2)
    _, retriever, blocks, _ = _setup(tiny_bert, "dense")  # a fresh process's models
    curves = train_query_encoder(retriever, QUESTIONS, blocks, budget, 0.01, 1.0, tmp_path / "killed", QUESTIONS,
                                 checkpoint_every=2)
    assert [r["step"] for r in curves.steps] == [1, 2, 3, 4, 5, 6]
    for k, v in retriever.query_encoder.state_dict().items():
        assert torch.allclose(v, straight[k], atol=1e-6), k
