"""Precision and recall of salient spans against hand-labelled sentences."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realm_core.errors import InputError
from realm_core.spans.mining import load_ner, salient_spans


@dataclass(frozen=True)
class SpanScores:
    sentences: int
    gold: int
    predicted: int
    exact: int        # predicted spans with exactly a gold span's offsets
    overlapping: int  # gold spans overlapped by some predicted span

    @property
    def precision(self) -> float:
        return self.exact / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.exact / self.gold if self.gold else 0.0

    @property
    def overlap_recall(self) -> float:
        return self.overlapping / self.gold if self.gold else 0.0


def load_gold(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line)
            for s in row["spans"]:
                if row["text"][s["start"]:s["end"]] != s["text"]:
                    raise InputError(path, f"span offsets that select {s['text']!r}",
                                     position=f"line {lineno}")
        except (json.JSONDecodeError, KeyError) as e:
            raise InputError(path, "{text, spans: [{start, end, text, type}]}",
                             position=f"line {lineno}", found=str(e)) from None
        rows.append(row)
    return rows


def score(gold_rows: list[dict[str, Any]], predicted: list[list[tuple[int, int, str]]],
          kinds: set[str] | None = None) -> SpanScores:
    """Exact-offset matching of (start, end, kind) spans; `kinds` keeps 'entity' or 'date'."""
    n_gold = n_pred = exact = overlapping = 0
    for row, pred in zip(gold_rows, predicted, strict=True):
        gold = {(s["start"], s["end"]) for s in row["spans"] if kinds is None or s["type"] in kinds}
        pred_set = {(a, b) for a, b, kind in pred if kinds is None or kind in kinds}
        n_gold += len(gold)
        n_pred += len(pred_set)
        exact += len(gold & pred_set)
        overlapping += sum(any(a < pe and pa < b for pa, pe in pred_set) for a, b in gold)
    return SpanScores(len(gold_rows), n_gold, n_pred, exact, overlapping)


def evaluate(path: Path, spacy_model: str, labels: frozenset[str]) -> dict[str, SpanScores]:
    rows = load_gold(path)
    nlp = load_ner(spacy_model)
    predicted = []
    for row, doc in zip(rows, nlp.pipe([r["text"] for r in rows]), strict=True):
        ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
        predicted.append([(w.start, w.end, "date" if w.label == "DATE" else "entity")
                          for w, _ in salient_spans(row["text"], ents, labels)])
    return {"all": score(rows, predicted), "entity": score(rows, predicted, {"entity"}),
            "date": score(rows, predicted, {"date"})}
