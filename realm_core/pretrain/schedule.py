"""The retriever's schedule through REALM's cold start: when the encoders get a gradient and
whether a run is collapsing onto the null block, decided from the logged step rows alone.

A reader that cannot yet use what it retrieves gives the retriever only the null block's signal:
at full rate the encoders collapse onto it (docs/experiments/realm-gain.md). Atlas keeps the
retriever frozen for a first phase (`--freeze_retriever_steps`); REALM's reference implementation
watches retrieval utility, the marginal log-likelihood minus the null block's. Both are here:
a frozen first phase, an optional gate on the utility's recent mean, and the report of a
sustained stretch below 0.

Shapes: S logged steps, W steps in the unfreeze gate's window.
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


def retriever_learns_at(step: int, history: list[dict[str, float]], config: PretrainConfig) -> bool:
    """Whether the encoders get a gradient at `step` (0-based), given the rows of the steps
    before it: never under `freeze_retriever`, not in the frozen first phase, and, with
    `retriever_unfreeze_utility`, not until the mean retrieval utility of the last
    `utility_window` steps is above it by `utility_standard_errors` standard errors of that mean
    (a mean that crosses it by chance does not open the gate); once they have trained they keep
    training. A function
    of the logged rows only, so a resumed run (and every rank) decides as the first did."""
    if config.freeze_retriever or step < config.retriever_frozen_steps:
        return False
    if config.retriever_unfreeze_utility is None or (history and retriever_trained(history[-1], config.retriever_frozen_steps)):
        return True
    recent = history[-config.utility_window:]
    if len(recent) < config.utility_window:
        return False
    utility = np.asarray([r.get("retrieval_utility", 0.0) for r in recent])  # (W,)
    standard_error = float(utility.std(ddof=1) / np.sqrt(len(utility))) if len(utility) > 1 else 0.0
    return float(utility.mean()) - config.utility_standard_errors * standard_error > config.retriever_unfreeze_utility


def first_trained_step(history: list[dict[str, float]], frozen_steps: int) -> int | None:
    """The 0-based step at which the encoders first had a gradient, or None."""
    for row in history:
        if retriever_trained(row, frozen_steps):
            return int(row["step"]) - 1
    return None
