import json
from pathlib import Path

import pytest

from realm_core.config import IngestConfig
from realm_core.errors import InputError
from realm_core.ingest.corpora import read_dpr_json, read_dpr_tsv, read_jsonl, read_squad
from realm_core.ingest.stage import run_ingest
from realm_core.store.artifacts import ArtifactStore


def test_squad_article_becomes_one_document(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"version": "1.1", "data": [
        {"title": "Super_Bowl_50", "paragraphs": [{"context": "P one."}, {"context": " P two. "}]}]}))
    docs = list(read_squad(f, "squad"))
    assert [(d["doc_id"], d["title"], d["text"]) for d in docs] == [
        ("squad:Super_Bowl_50", "Super Bowl 50", "P one.\n\nP two.")]


def test_squad_missing_key_names_position(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"data": [{"title": "A", "paragraphs": [{"context": "x"}, {"qas": []}]}]}))
    with pytest.raises(InputError, match=r"s.json at data\[0\].paragraphs\[1\]: expected key 'context'"):
        list(read_squad(f, "squad"))
    with pytest.raises(InputError, match="expected key 'data'"):
        f.write_text("{}")
        list(read_squad(f, "squad"))


def test_dpr_json_passages_deduplicated(tmp_path: Path) -> None:
    f = tmp_path / "d.json"
    ctx = {"title": "T", "text": "body", "passage_id": "7"}
    f.write_text(json.dumps([{"question": "q", "positive_ctxs": [ctx], "negative_ctxs": [ctx],
                              "hard_negative_ctxs": [dict(ctx, passage_id="8")]}]))
    assert [d["doc_id"] for d in read_dpr_json(f, "dpr")] == ["dpr:7", "dpr:8"]


def test_dpr_tsv(tmp_path: Path) -> None:
    f = tmp_path / "p.tsv"
    f.write_text('id\ttext\ttitle\n1\t"Aaron is a prophet."\tAaron\n')
    assert [(d["doc_id"], d["title"], d["text"]) for d in read_dpr_tsv(f, "psgs")] == [
        ("psgs:1", "Aaron", "Aaron is a prophet.")]
    f.write_text("a\tb\n")
    with pytest.raises(InputError, match="p.tsv at line 1: expected header"):
        list(read_dpr_tsv(f, "psgs"))


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"id": 1, "title": "A", "text": "a"}\n{"id": 2, "title": "B"}\n')
    with pytest.raises(InputError, match="c.jsonl at line 2: expected key 'text'"):
        list(read_jsonl(f, "j"))
    f.write_text('{"id": 1, "title": "A", "text": "a"}\nnot json\n')
    with pytest.raises(InputError, match="c.jsonl at line 2: expected a JSON object"):
        list(read_jsonl(f, "j"))


def test_empty_jsonl_fails_and_leaves_no_artifact(tmp_path: Path) -> None:
    f = tmp_path / "empty.jsonl"
    f.write_text("\n")
    cfg = IngestConfig(sources=({"kind": "jsonl", "path": str(f)},))
    with pytest.raises(InputError, match="empty.jsonl: expected at least one JSON line"):
        run_ingest(ArtifactStore(tmp_path / "art"), cfg)
    assert not (tmp_path / "art" / "documents").exists()


def test_squad_file_missing_key_leaves_no_artifact(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"data": [{"paragraphs": []}]}))
    cfg = IngestConfig(sources=({"kind": "squad", "path": str(f)},))
    with pytest.raises(InputError, match=r"bad.json at data\[0\]: expected key 'title'"):
        run_ingest(ArtifactStore(tmp_path / "art"), cfg)
    assert not (tmp_path / "art" / "documents").exists()
