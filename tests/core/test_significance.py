"""Paired comparisons of two systems on the same questions, on tables worked out by hand."""

import pytest

from realm_core.answers import f1_score
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap


def test_mcnemar_exact_on_known_tables() -> None:
    a = [True, True, True, False, False, True]
    b = [True, False, False, False, True, False]
    # discordant: 3 only-a, 1 only-b; p = 2 * P(X <= 1 | n=4, 1/2) = 2 * 5/16
    assert mcnemar_p(a, b) == pytest.approx(10 / 16)
    assert mcnemar_p([True] * 10, [False] * 10) == pytest.approx(2 / 1024)
    assert mcnemar_p([True, False], [True, False]) == 1.0  # no discordant pair
    assert mcnemar_p(a, b) == mcnemar_p(b, a)


def test_paired_bootstrap_delta_and_interval() -> None:
    a = [True, True, True, False, False, True]
    b = [True, False, False, False, True, False]
    delta, lo, hi = paired_bootstrap(a, b, resamples=2000, seed=1)
    assert delta == pytest.approx(1 / 3)
    assert -0.5 < lo < delta < hi <= 1.0
    assert paired_bootstrap(a, b, 2000, seed=1) == (delta, lo, hi)  # seeded
    # the same answer difference on every question: no spread at all
    assert paired_bootstrap([True] * 5, [False] * 5, 500) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        paired_bootstrap([], [])


def test_f1_is_squads_token_overlap() -> None:
    assert f1_score("the big cat", ["big dog"]) == pytest.approx(0.5)
    assert f1_score("Denver Broncos", ["Broncos", "Denver Broncos"]) == 1.0
    assert f1_score("", ["x"]) == 0.0 and f1_score("a", ["the"]) == 1.0  # both empty after normalising


def test_question_outcomes_kept_in_a_file_read_back_as_they_were() -> None:
    """What `realm evaluate --json` and experiments/paired_runs.py keep of each question: one mark a
    qid, '-' where a system was not asked it (the gold paragraph reader on NQ, say)."""
    from realm_core.errors import InputError
    from realm_core.openqa import outcomes

    rows = [{"dataset": "squad-open", "system": "BM25", "qid": q, "correct": c} for q, c in (("q2", True), ("q1", False))]
    rows += [{"dataset": "squad-open", "system": "gold", "qid": "q2", "correct": False},
             {"dataset": "nq", "system": "BM25", "qid": "nq-1", "correct": True}]
    by_system = outcomes.from_predictions(rows, "squad-open")
    kept = outcomes.encode(by_system)
    assert kept == {"qids": ["q1", "q2"], "correct": {"BM25": "01", "gold": "-0"}}
    assert outcomes.decode(kept, "x.json") == by_system == {"BM25": {"q1": False, "q2": True}, "gold": {"q2": False}}
    with pytest.raises(InputError, match=r"x.json at the outcomes of 'gold': expected one of 0, 1, - for each of the 2"):
        outcomes.decode({"qids": ["q1", "q2"], "correct": {"gold": "0"}}, "x.json")
    with pytest.raises(InputError, match=r"x.json: expected outcomes as"):
        outcomes.decode({"correct": {}}, "x.json")
