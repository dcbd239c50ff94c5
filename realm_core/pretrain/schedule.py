"""The retriever's schedule through REALM's cold start: when the encoders get a gradient and
whether a run is collapsing onto the null block, decided from the logged step rows alone.

A reader that cannot yet use what it retrieves gives the retriever only the null block's signal:
at full rate the encoders collapse onto it (docs/experiments/realm-gain.md). Atlas keeps the
retriever frozen for a first phase (`--freeze_retriever_steps`); REALM's reference implementation
watches retrieval utility, the marginal log-likelihood minus the null block's. Here: the frozen
first phase, and the report of a sustained stretch of utility below 0.

Shapes: S logged steps.
"""

from __future__ import annotations

import numpy as np

from realm_core.config import PretrainConfig


def utility_below_zero(steps: list[dict[str, float]], window: int) -> tuple[int, int] | None:
    """The longest stretch (first step, last step) over which the mean retrieval utility of every
    `window` consecutive steps stays below 0: retrieved blocks made the masked spans less likely
    than the null block for that long, the sign of a retriever collapsing onto it (REALM §4.5
    watches the same quantity). None when no window's mean is below 0."""
    values = np.asarray([r.get("retrieval_utility", 0.0) for r in steps], dtype=np.float64)
    if len(values) < window:
        return None
    means = np.convolve(values, np.ones(window) / window, mode="valid")  # (S - window + 1,)
    best: tuple[int, int] | None = None
    run_start = None
    for i, below in enumerate([*(means < 0), False]):
        if below and run_start is None:
            run_start = i
        elif not below and run_start is not None:
            first, last = int(steps[run_start]["step"]), int(steps[i - 1 + window - 1]["step"])
            if best is None or last - first > best[1] - best[0]:
                best = (first, last)
            run_start = None
    return best


def retriever_trained(row: dict[str, float], frozen_steps: int) -> bool:
    """Whether the encoders had a gradient at the step `row` logs (rows written before the
    `retriever_trained` column: every step past the frozen first phase)."""
    return bool(row.get("retriever_trained", float(row["step"] > frozen_steps)))


def retriever_learns_at(step: int, config: PretrainConfig) -> bool:
    """Whether the encoders get a gradient at `step` (0-based): never under `freeze_retriever`,
    not in the frozen first phase, at every step after it. A function of the step alone, so a
    resumed run (and every rank) decides as the first did."""
    return not config.freeze_retriever and step >= config.retriever_frozen_steps


def first_trained_step(history: list[dict[str, float]], frozen_steps: int) -> int | None:
    """The 0-based step at which the encoders first had a gradient, or None."""
    for row in history:
        if retriever_trained(row, frozen_steps):
            return int(row["step"]) - 1
    return None
