"""The file of queries `realm search --queries` and `realm ask --questions` read: plain lines or
JSONL, and what a malformed line gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli.query import read_queries
from realm_core.errors import InputError


def test_lines_and_jsonl_objects_with_their_answers(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join([
        json.dumps({"id": "a", "question": "Who?", "answers": ["Piłsudski", "Józef Piłsudski"]}),
        json.dumps({"qid": "b", "question": "When?", "answer": "1918"}),  # one answer, as a string
        json.dumps({"question": "Where?", "answers": None}),  # null: no answers, as when left out
        "",
        "Where is the Vistula?",
    ]) + "\n")
    assert read_queries(path) == [
        {"qid": "a", "question": "Who?", "answers": ["Piłsudski", "Józef Piłsudski"]},
        {"qid": "b", "question": "When?", "answers": ["1918"]},
        {"qid": "3", "question": "Where?", "answers": []},
        {"qid": "5", "question": "Where is the Vistula?", "answers": []},
    ]


@pytest.mark.parametrize("line, expected", [
    ('{"question": "Who?", "answers": [1918]}', "expected 'answers' as a string or a list of strings, found [1918]"),
    ('{"question": "Who?", "answers": {"text": "x"}}', "found {\"text\": \"x\"}"),
    ('{"question": 7}', "expected an object with a string 'question'"),
    ('{"question": "Who?"', "expected a JSON object"),
])
def test_a_malformed_line_is_an_input_error_naming_the_file_and_line(tmp_path: Path, line: str,
                                                                     expected: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text("Where is the Vistula?\n" + line + "\n")
    with pytest.raises(InputError) as e:
        read_queries(path)
    assert str(e.value).startswith(f"{path} at line 2: ") and expected in str(e.value), str(e.value)


def test_an_empty_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("\n  \n")
    with pytest.raises(InputError, match="at least one query"):
        read_queries(path)


def test_the_questions_summary_says_who_answered_and_how_well() -> None:
    from pathlib import Path

    from flows.cli.query import questions_summary

    rows = [{"correct": True, "f1": 1.0}, {"correct": False, "f1": 0.5}, {"correct": None, "f1": None}]
    line = questions_summary(rows, "BM25 + reader, asked for with --system bm25", Path("p.jsonl"))
    assert line == ("3 questions answered by BM25 + reader, asked for with --system bm25; EM 50.0, F1 75.0 on "
                    "the 2 given with answers; predictions in p.jsonl")
    assert "EM" not in questions_summary([{"correct": None, "f1": None}], "x", Path("p.jsonl"))
