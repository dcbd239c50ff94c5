"""REALM against null-only on hand-made held-out rows: exact accuracies and deltas."""

import numpy as np
import pytest

from realm_core.pretrain.gain import gain_report, heldout_test, holder_retrieval


def _row(doc: str, block: int, correct: bool, recoverable: bool, retrieved: bool = False) -> dict[str, object]:
    return {"doc_id": doc, "block_id": block, "correct": correct, "log_p": -1.0 if correct else -3.0,
            "recoverable": recoverable, "answer_retrieved": retrieved}


def test_heldout_test_pairs_the_runs_on_the_same_examples() -> None:
    realm = [_row("a", 0, True, True, True), _row("a", 1, True, False), _row("b", 2, False, True),
             _row("c", 3, True, True, True)]
    null = [_row("a", 0, False, True), _row("a", 1, True, False), _row("b", 2, False, True),
            _row("c", 3, False, True)]
    out = heldout_test(realm, null, resamples=200)
    assert out["examples"] == 4 and out["articles"] == 3 and out["recoverable"] == 3
    assert out["systems"]["REALM"]["accuracy"] == 0.75 and out["systems"]["null only"]["accuracy"] == 0.25
    assert out["systems"]["REALM"]["recoverable_accuracy"] == pytest.approx(2 / 3)
    assert out["gain"]["accuracy_delta"] == pytest.approx(0.5)
    assert out["gain"]["recoverable_delta"] == pytest.approx(2 / 3)
    lo, hi = out["gain"]["accuracy_ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    split = out["by_retrieval"]
    assert split["answer_retrieved"]["examples"] == 2 and split["answer_retrieved"]["delta"] == pytest.approx(1.0)
    assert split["answer_not_retrieved"]["examples"] == 2 and split["answer_not_retrieved"]["delta"] == 0.0
    assert "| REALM | 75.0 | 66.7 |" in gain_report({"heldout": out})


def test_heldout_test_refuses_runs_scored_on_other_examples() -> None:
    with pytest.raises(ValueError, match="different held-out examples"):
        heldout_test([_row("a", 0, True, True)], [_row("a", 1, True, True)])


def test_holder_retrieval_counts_ranks_within_k() -> None:
    start, end = np.array([1, 5, 200, 50]), np.array([1, 2, 90, 60])
    out = holder_retrieval(start, end, ["a", "b", "c", "d"], top=7, resamples=200)
    assert out["within_top_7"]["start"] == 0.5 and out["within_top_7"]["end"] == 0.5
    assert out["within_top_100"]["start"] == 0.75 and out["within_top_100"]["end"] == 1.0
    assert out["within_top_100"]["end_minus_start"]["delta"] == pytest.approx(0.25)
    assert out["rank_rose"] == 0.5 and out["rank_fell"] == 0.25
