"""Open-QA question sets as typed records, and every reader of them: SQuAD-open and DPR's
retriever JSON (the pretraining corpus's own questions), and the benchmarks of REALM Table 1:

- NQ-open: JSONL `{"question", "answer": [..]}`.
- DPR-style topics (NQ dev, TriviaQA dev): `question<TAB>['answer', ...]`, the list a Python
  literal (CSV-quoted when it holds a double quote), parsed with `ast.literal_eval`, never `eval`.
- WebQuestions: a JSON list of `{"qId", "qText", "answers": [..]}`.
- CuratedTREC: TSV `id<TAB>type<TAB>question<TAB>answer regex`; answers are regexes, matched
  case-insensitively with `re.search` as DrQA and REALM do (`Question.match == "regex"`).

A line that does not parse, an empty answer list or an invalid regex is dropped and counted by
reason in `QuestionSet.dropped`; a file in which no line parses is not that format at all and
raises `InputError` naming the file and its first line.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
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


class _Drop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    yield number, line.rstrip("\n")
    except OSError as e:
        raise unreadable_input(path, "a question file", e) from None
    except UnicodeDecodeError as e:
        raise InputError(path, "UTF-8 text", found=str(e)) from None


def _read_lines(path: Path, name: str, expected: str,
                parse: Callable[[int, str], Question]) -> QuestionSet:
    questions: list[Question] = []
    dropped: Counter[str] = Counter()
    first_bad: int | None = None
    for number, line in _lines(path):
        try:
            questions.append(parse(number, line))
        except _Drop as d:
            dropped[d.reason] += 1
            if d.reason == "malformed line" and first_bad is None:
                first_bad = number
    if not questions:
        raise InputError(path, expected, position=f"line {first_bad or 1}",
                         found="no line in that format" if first_bad else "no questions")
    return QuestionSet(name, questions, dict(dropped))


def _answers(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _Drop("malformed line")
    answers = tuple(v.strip() for v in values if v.strip())
    if not answers:
        raise _Drop("empty answer list")
    return answers


def nq_open(path: Path, name: str = "nq-open") -> QuestionSet:
    def parse(number: int, line: str) -> Question:
        try:
            obj = json.loads(line)
            question, answers = obj["question"], obj["answer"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise _Drop("malformed line") from None
        if not isinstance(question, str) or not question.strip():
            raise _Drop("malformed line")
        return Question(f"{name}-{number}", question.strip(), _answers(answers), name)

    return _read_lines(path, name, 'JSONL lines {"question": str, "answer": [str, ...]}', parse)


def dpr_topics(path: Path, name: str = "nq-dev") -> QuestionSet:
    def parse(number: int, line: str) -> Question:
        # the files were written by a CSV writer: a list holding a double quote is itself quoted
        fields = next(csv.reader([line], delimiter="\t"))
        if len(fields) != 2 or not fields[0].strip():
            raise _Drop("malformed line")
        question, literal = fields
        try:
            answers = ast.literal_eval(literal.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise _Drop("malformed line") from None
        return Question(f"{name}-{number}", question.strip(), _answers(answers), name)

    return _read_lines(path, name, "question<TAB>a Python list of answer strings", parse)


def curated_trec(path: Path, name: str = "curatedtrec") -> QuestionSet:
    def parse(number: int, line: str) -> Question:
        fields = line.split("\t")
        if len(fields) != 4 or not fields[2].strip() or not fields[3].strip():
            raise _Drop("malformed line")
        pattern = fields[3].strip()
        try:
            re.compile(pattern, re.IGNORECASE)
        except re.error:
            raise _Drop("invalid regex") from None
        return Question(f"{name}-{fields[0]}", fields[2].strip(), (pattern,), name, match="regex")

    return _read_lines(path, name, "id<TAB>type<TAB>question<TAB>answer regex", parse)


def web_questions(path: Path, name: str = "webquestions") -> QuestionSet:
    expected = 'a JSON list of {"qId", "qText", "answers": [...]}'
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise unreadable_input(path, expected, e) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, expected, position=f"line {getattr(e, 'lineno', 1)}",
                         found=f"invalid JSON ({e})") from None
    if not isinstance(data, list):
        raise InputError(path, expected, position="line 1", found=type(data).__name__)
    questions: list[Question] = []
    dropped: Counter[str] = Counter()
    for i, rec in enumerate(data):
        try:
            if not isinstance(rec, dict) or not isinstance(rec.get("qText"), str):
                raise _Drop("malformed line")
            questions.append(Question(str(rec.get("qId", f"{name}-{i}")), rec["qText"].strip(),
                                      _answers(rec.get("answers")), name))
        except _Drop as d:
            dropped[d.reason] += 1
    if not questions:
        raise InputError(path, expected, position="line 1", found="no usable record")
    return QuestionSet(name, questions, dict(dropped))
