"""Each question's outcome, kept beside a run's figures (`realm evaluate --json`, the paired
results of experiments/paired_runs.py), so that two runs can be paired question by question after
their artifacts are gone.

One dataset's outcomes are `{"qids": [sorted ids], "correct": {system: marks}}`, where `marks`
has one character a qid: `1` right, `0` wrong, `-` not asked of that system."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from realm_core.errors import InputError

Outcomes = dict[str, dict[str, bool]]
"""system -> qid -> correct"""


def from_predictions(rows: Iterable[Mapping[str, Any]], dataset: str) -> Outcomes:
    """The outcomes of one dataset from `openqa_predictions` rows (dataset, system, qid, correct)."""
    out: Outcomes = {}
    for r in rows:
        if r["dataset"] == dataset:
            out.setdefault(r["system"], {})[r["qid"]] = bool(r["correct"])
    return out


def encode(outcomes: Outcomes) -> dict[str, Any]:
    qids = sorted({q for by_qid in outcomes.values() for q in by_qid})
    return {"qids": qids,
            "correct": {system: "".join("-" if q not in by_qid else "1" if by_qid[q] else "0" for q in qids)
                        for system, by_qid in sorted(outcomes.items())}}


def decode(kept: Mapping[str, Any], where: str) -> Outcomes:
    """`encode`'s inverse; `where` names the file in the error for a malformed entry."""
    try:
        qids, marks = list(kept["qids"]), dict(kept["correct"])
    except (KeyError, TypeError, ValueError):
        raise InputError(where, "outcomes as {'qids': [...], 'correct': {system: marks}}") from None
    out: Outcomes = {}
    for system, row in marks.items():
        if not isinstance(row, str) or len(row) != len(qids) or set(row) - {"0", "1", "-"}:
            raise InputError(where, f"one of 0, 1, - for each of the {len(qids)} qids",
                             position=f"the outcomes of {system!r}")
        out[system] = {q: c == "1" for q, c in zip(qids, row, strict=True) if c != "-"}
    return out
