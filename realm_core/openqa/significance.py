"""Paired comparisons of two QA systems on the same questions: the difference in accuracy with a
95% bootstrap interval over questions, and McNemar's exact test on the discordant pairs. A gap
of a few questions between systems is noise; these say how much.

Shapes: Q questions, R bootstrap resamples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def paired_bootstrap(a: Sequence[bool], b: Sequence[bool], resamples: int = 10_000,
                     seed: int = 0) -> tuple[float, float, float]:
    """(delta, lo, hi): mean(a) - mean(b) over the same questions and its 95% percentile interval
    from `resamples` resamplings of the questions with replacement."""
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)  # (Q,) per-question difference
    if x.size == 0:
        raise ValueError("paired_bootstrap needs at least one question")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)  # (R,)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), float(lo), float(hi)


def mcnemar_p(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value: under no difference, the questions that exactly one system
    answers split between them as a fair coin would (binomial, n = discordant pairs)."""
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)
