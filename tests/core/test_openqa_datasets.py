import json
from pathlib import Path

import pytest

from realm_core.answers import regex_match
from realm_core.errors import InputError
from realm_core.questions import curated_trec, dpr_topics, nq_open, web_questions


def test_nq_open_counts_malformed_lines_and_empty_answers(tmp_path: Path) -> None:
    f = tmp_path / "nq.jsonl"
    f.write_text('{"question": "who wrote it", "answer": ["Ada", " "]}\n{oops\n\n'
                 '{"question": "when", "answer": []}\n{"question": "where"}\n')
    qs = nq_open(f)
    assert [(q.question, q.answers) for q in qs.questions] == [("who wrote it", ("Ada",))]
    assert qs.dropped == {"malformed line": 2, "empty answer list": 1}


def test_dpr_topics_use_literal_eval_never_eval(tmp_path: Path) -> None:
    f = tmp_path / "topics.txt"
    f.write_text("who sings\t['Linda Davis']\nbad\t__import__('os').getcwd()\nno tab here\n"
                 'where was it\t"[\'the Ingres Museum\', ""Château d\'Amboise""]"\n')
    qs = dpr_topics(f)
    assert [q.answers for q in qs.questions] == [("Linda Davis",), ("the Ingres Museum", "Château d'Amboise")]
    assert qs.dropped == {"malformed line": 2}


def test_curated_trec_keeps_regexes_and_counts_invalid_ones(tmp_path: Path) -> None:
    f = tmp_path / "trec.tsv"
    f.write_text("1\tfactoid\tHow tall is it?\t20\\s?,?\\s?320\\s?f(ee|oo)t$\n2\tfactoid\tBad?\t(unclosed\n")
    qs = curated_trec(f)
    assert qs.questions[0].match == "regex" and qs.dropped == {"invalid regex": 1}
    assert regex_match(qs.questions[0].answers, "The summit is 20,320 FEET")
    assert not regex_match(qs.questions[0].answers, "about 6,000 metres")


def test_webquestions_records(tmp_path: Path) -> None:
    f = tmp_path / "wq.json"
    f.write_text(json.dumps([{"qId": "w1", "qText": "what?", "answers": ["X"]}, {"qId": "w2"}]))
    qs = web_questions(f)
    assert [q.qid for q in qs.questions] == ["w1"] and qs.dropped == {"malformed line": 1}


def test_a_file_in_another_format_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "not-nq.jsonl"
    f.write_text("\nwho sings\t['Linda Davis']\n")
    with pytest.raises(InputError, match=r"not-nq.jsonl at line 2: expected JSONL lines"):
        nq_open(f)
    with pytest.raises(InputError, match=r"wq.json at line 1: expected a JSON list"):
        (tmp_path / "wq.json").write_text("{}")
        web_questions(tmp_path / "wq.json")


def test_the_bundled_benchmarks_load_without_silent_drops(shared_data: Path) -> None:
    o = shared_data / "openqa"
    nq = nq_open(o / "NQ-open.dev.jsonl")
    assert len(nq.questions) == 3610 and nq.dropped == {}
    dev = dpr_topics(o / "anserini-tools-topics.dpr.nq.dev.txt")
    assert len(dev.questions) == 8757 and dev.dropped == {}  # 153 lines are CSV-quoted
    trivia = dpr_topics(o / "anserini-tools-topics.dpr.trivia.dev.txt")
    assert len(trivia.questions) == 8837 and trivia.dropped == {}
    wq = web_questions(o / "webquestions" / "test.json")
    assert len(wq.questions) + sum(wq.dropped.values()) == 2032
    ct = curated_trec(o / "curatedtrec" / "large2470-test.tsv")
    assert len(ct.questions) + sum(ct.dropped.values()) == 766


def test_questions_stage_writes_one_table_and_reports_drops(shared_data: Path, tmp_path: Path) -> None:
    from realm_core.config import QuestionsConfig
    from realm_core.openqa.questions_stage import run_load_questions
    from realm_core.store.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path / "art")
    result = run_load_questions(store, QuestionsConfig())
    assert result.stats["nq/test"] == 3610 and result.stats["wq/test"] == 2032
    assert result.stats["squad-open/dev"] + result.stats["squad-open/test"] == 1971  # articles 30-39
    table = store.open(result.ref).read_table("questions")
    assert table.num_rows == sum(v for v in result.stats.values() if isinstance(v, int))
    assert set(table.column("match").to_pylist()) == {"text", "regex"}
    assert "| ct | test | 766 | none |" in result.report and "| squad-open | test | 1,034 | none |" in result.report
    assert run_load_questions(store, QuestionsConfig()).cached is True
