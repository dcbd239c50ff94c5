"""Open-QA question sets as typed records. Every reader counts what it drops and why."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from realm_core.errors import InputError, unreadable_input


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    answers: tuple[str, ...]
    dataset: str
    match: Literal["text", "regex"] = "text"  # CuratedTREC's answers are regexes
    title: str | None = None                  # SQuAD: the gold paragraph's article title
    context: str | None = None                # SQuAD: the gold paragraph


@dataclass
class QuestionSet:
    name: str
    questions: list[Question]
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count


def _json(path: Path, expected: str) -> Any:
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise unreadable_input(path, expected, e) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, expected, found=f"invalid JSON ({e})") from None


def squad_questions(path: Path, articles: tuple[int, int], name: str = "squad-open") -> QuestionSet:
    """The questions of SQuAD articles `articles[0]..articles[1]` (inclusive, file order) with
    their distinct gold answer texts: SQuAD-open (Chen et al. 2017; REALM Table 1)."""
    data = _json(path, "SQuAD v1.1 JSON with a top-level 'data' list")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError(path, "SQuAD v1.1 JSON with a top-level 'data' list", found=type(data).__name__)
    lo, hi = articles
    if hi >= len(data["data"]):
        raise InputError(path, f"at least {hi + 1} articles", found=f"{len(data['data'])}")
    out: list[Question] = []
    dropped = {"no answer": 0}
    for a in range(lo, hi + 1):
        for p, para in enumerate(data["data"][a].get("paragraphs", [])):
            for qa in para.get("qas", []):
                answers = tuple(dict.fromkeys(x["text"].strip() for x in qa.get("answers", [])
                                              if x.get("text", "").strip()))
                if not answers:
                    dropped["no answer"] += 1
                    continue
                out.append(Question(str(qa.get("id", f"{a}-{p}-{len(out)}")), qa["question"].strip(),
                                    answers, name, title=str(data["data"][a].get("title", "")).replace("_", " "),
                                    context=str(para.get("context", "")).strip()))
    return QuestionSet(name, out, dropped)


def dpr_questions(path: Path, name: str = "dpr-nq-sample") -> QuestionSet:
    """Questions of a DPR retriever JSON file (`question`, `answers`, `*_ctxs`)."""
    data = _json(path, "DPR retriever JSON: a list of {question, answers, positive_ctxs, ...}")
    if not isinstance(data, list):
        raise InputError(path, "a JSON list of DPR records", found=type(data).__name__)
    out: list[Question] = []
    dropped = {"no answer": 0}
    for i, rec in enumerate(data):
        if not isinstance(rec, dict) or "question" not in rec:
            raise InputError(path, "records with a 'question'", position=f"[{i}]")
        answers = tuple(a.strip() for a in rec.get("answers", []) if isinstance(a, str) and a.strip())
        if not answers:
            dropped["no answer"] += 1
            continue
        out.append(Question(f"{name}-{i}", rec["question"].strip(), answers, name))
    return QuestionSet(name, out, dropped)
