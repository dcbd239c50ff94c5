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
