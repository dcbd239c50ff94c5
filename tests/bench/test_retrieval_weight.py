"""experiments/retrieval_weight.py: the holders' share of the retrieved blocks' weight against an
even split's, at each temperature."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))

import retrieval_weight  # noqa: E402

ARTICLES = ["a", "a", "b", "c"]


def test_scores_that_cannot_tell_holders_apart_give_them_the_even_split_at_any_temperature() -> None:
    scores = np.zeros((4, 3))
    holds = np.array([[True, False, False], [True, True, False], [False, False, False], [False, False, True]])
    for t in (1.0, 0.1):
        row = retrieval_weight.holder_weight(scores, holds, ARTICLES, t)
        # the example with no holder retrieved is left out of both shares
        assert row["holder_share"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 3) / 3)
        assert row["holder_share"] == pytest.approx(row["even_split_share"])
        assert row["holder_minus_even"]["delta"] == pytest.approx(0.0)
        assert row["max_weight"] == pytest.approx(1 / 3)


def test_scores_that_rank_the_holder_first_give_it_more_weight_as_the_temperature_falls() -> None:
    scores = np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 0.0, -np.inf], [2.0, 0.0, 1.0]])  # -inf: no block
    holds = np.array([[True, False, False], [False, False, True], [True, False, False], [True, False, False]])
    warm, sharp = (retrieval_weight.holder_weight(scores, holds, ARTICLES, t) for t in (1.0, 0.1))
    # the even split counts the blocks retrieved: the third example read two, not three
    assert warm["even_split_share"] == pytest.approx((1 / 3 + 1 / 3 + 1 / 2 + 1 / 3) / 4)
    assert warm["even_split_share"] < warm["holder_share"] < sharp["holder_share"] <= 1.0
    assert sharp["max_weight"] > warm["max_weight"]
    assert sharp["holder_minus_even"]["ci95"][0] > 0


def test_a_run_to_measure_is_verified_before_its_encoders_are_read(tmp_path: Path) -> None:
    from torch import nn

    from realm_core.artifacts import ArtifactStore
    from realm_core.errors import ArtifactError, CorruptArtifactError
    from realm_core.training import adamw, save_checkpoint

    store = ArtifactStore(tmp_path / "artifacts")
    # a training checkpoint whose weights changed after it was written
    model = nn.Linear(2, 2)
    step = save_checkpoint(tmp_path / "checkpoints", 40, {"query_encoder": model, "doc_encoder": model},
                           adamw([model], 1e-3, 0.0), {})
    (step / "doc_encoder.safetensors").write_bytes(b"not the weights it recorded")
    with pytest.raises(ArtifactError, match="doc_encoder.safetensors: checkpoint file missing or altered"):
        retrieval_weight.realm_run(step, store)
    # a published run whose encoder file changed after it was published
    with store.write("realm_model", "k" * 20, config={"steps": 40}, config_hash="h", inputs={}) as out:
        out.file("query_encoder/weights.bin").write_bytes(b"trained")
        out.file("doc_encoder/weights.bin").write_bytes(b"trained too")
    run = Path(store.path("realm_model", "k" * 20))
    assert retrieval_weight.realm_run(run, store) == (40, None)
    assert retrieval_weight.realm_encoders(run, None, None, "unused") == (
        str(run / "query_encoder"), str(run / "doc_encoder"))
    (run / "query_encoder" / "weights.bin").write_bytes(b"altered")
    with pytest.raises(CorruptArtifactError, match="weights.bin"):
        retrieval_weight.realm_run(run, store)
    with pytest.raises(ArtifactError, match="expected a realm_model artifact or a pretraining checkpoint"):
        retrieval_weight.realm_run(tmp_path, store)
    # a checkpoint of a run that did not train the encoders has none of their weights
    reader_only = save_checkpoint(tmp_path / "reader_only", 40, {"reader": model}, adamw([model], 1e-3, 0.0), {})
    with pytest.raises(ArtifactError, match="query_encoder.safetensors: expected a pretraining checkpoint's"):
        retrieval_weight.realm_run(reader_only, store)
