"""Inputs that used to end in a traceback or an unbounded allocation: each now ends in
`error: <file or option>: <what was expected>`, exit 2, nothing written; memory stays bounded by
the configured cap however small the compressed input. In-process, fast."""

from __future__ import annotations

import bz2
import errno
import json
import os
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from realm_core.errors import ConfigError, InputError, QueryError, RealmError

runner = CliRunner()
DEEP = "[" * 100_000 + "]" * 100_000


def realm(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = runner.invoke(app, list(args), env={"COLUMNS": "400", **(env or {})})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.output


def _jsonl_config(tmp_path: Path, corpus: Path) -> Path:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"ingest:\n  sources:\n    - {{kind: jsonl, name: mine, path: {corpus}}}\n")
    return cfg


def test_json_nested_deeper_than_the_parser_reads_is_an_input_error(tmp_path: Path) -> None:
    corpus = tmp_path / "deep.jsonl"
    corpus.write_text(json.dumps({"id": 1, "title": "t", "text": "x"}) + "\n" + DEEP + "\n")
    code, output = realm("ingest", "--preset", "tiny", "--config", str(_jsonl_config(tmp_path, corpus)),
                         "--root", str(tmp_path / "art"))
    assert code == 2 and f"{corpus} at line 2: expected a JSON object, found JSON nested too deeply" in output
    assert not (tmp_path / "art" / "documents").exists()
    squad = tmp_path / "squad.json"
    squad.write_text(DEEP)
    from realm_core.ingest.corpora import read_squad

    with pytest.raises(InputError, match="nested too deeply"):
        list(read_squad(squad, "squad"))


def test_query_files_that_are_deep_or_binary_are_input_errors(tmp_path: Path) -> None:
    from flows.cli.query import read_queries

    deep, binary = tmp_path / "q.jsonl", tmp_path / "q.bin"
    deep.write_text("{" + DEEP[1:] + "\n")
    binary.write_bytes(b"\xff\xfe\x00\x81 what?\n")
    with pytest.raises(InputError, match="line 1: expected a JSON object"):
        read_queries(deep)
    with pytest.raises(InputError, match="expected UTF-8 text"):
        read_queries(binary)
    code, output = realm("ask", "--questions", str(binary), "--out", str(tmp_path / "o.jsonl"),
                         "--preset", "tiny", "--root", str(tmp_path / "art"))
    assert code == 2 and f"error: {binary}" in output and not (tmp_path / "o.jsonl").exists()


def test_a_jsonl_line_over_the_cap_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    from realm_core.ingest.corpora import read_jsonl

    corpus = tmp_path / "big.jsonl"
    with corpus.open("w") as f:
        f.write(json.dumps({"id": 1, "title": "t", "text": "small"}) + "\n")
        f.write(json.dumps({"id": 2, "title": "t", "text": "x" * 3_000_000}) + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="line 2: expected a JSON line of at most ingest.max_record_bytes"):
            list(read_jsonl(corpus, "mine", max_record_bytes=100_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # the 3 MB line was never held


def _dump(pages: list[str], prologue: str = "") -> bytes:
    body = "".join(f"<page><title>P{i}</title><ns>0</ns><id>{i + 1}</id><revision><id>1</id>"
                   f"<text>{text}</text></revision></page>" for i, text in enumerate(pages))
    return f'<?xml version="1.0"?>{prologue}<mediawiki>{body}</mediawiki>'.encode()


def test_a_page_over_the_cap_is_refused_with_memory_bounded_by_the_cap(tmp_path: Path) -> None:
    """A few kilobytes of bz2 that expand to one 40 MB page: refused at the cap (4 MB here), its
    text never held whole."""
    from realm_core.ingest.wikipedia import iter_pages

    dump = tmp_path / "bomb.xml.bz2"
    dump.write_bytes(bz2.compress(_dump(["small page", "a" * 40_000_000])))
    assert dump.stat().st_size < 10_000
    pages: list[str] = []
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"page #2: expected pages of at most ingest.max_record_bytes=4,000,000"):
            for page in iter_pages(dump, max_page_bytes=4_000_000):
                pages.append(page.title)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert pages == ["P0"] and peak < 20_000_000


def test_entity_declarations_are_refused_not_expanded(tmp_path: Path) -> None:
    from realm_core.ingest.wikipedia import iter_pages

    dump = tmp_path / "entities.xml"
    prologue = '<!DOCTYPE mediawiki [<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">]>'
    dump.write_bytes(_dump(["&a;&a;&a;&a;&a;&a;&a;&a;"], prologue))
    with pytest.raises(InputError, match="the prologue: expected a MediaWiki dump without entity declarations"):
        list(iter_pages(dump))


def test_yaml_aliases_expanding_past_the_bound_are_refused_at_once(tmp_path: Path) -> None:
    import time

    from realm_core.config import load_config

    levels = "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n' + levels)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases expand it past"):
        load_config("tiny", bomb)
    assert time.perf_counter() - t0 < 10  # refused before anything walks its billion values
    with pytest.raises(ConfigError, match=r"--set chunk.max_wordpieces=.*nested too deeply"):
        load_config("tiny", overrides=["chunk.max_wordpieces=" + DEEP])


def test_a_binary_config_file_is_a_config_error(tmp_path: Path) -> None:
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"chunk:\n  max_wordpieces: \xff\xfe\n")
    code, output = realm("config", "--preset", "tiny", "--config", str(binary))
    assert code == 2 and f"{binary}: expected a UTF-8 YAML config, found bad bytes at byte" in output


def test_queries_with_nothing_to_match_are_refused() -> None:
    from realm_core.query import check_query

    for q in ("???", "\u200b", " \u200b\u200d ", "!!! ..."):
        with pytest.raises(QueryError):
            check_query(q, 100)
    assert check_query("\u200bWarsaw?", 100) == "Warsaw?"


def test_output_files_are_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli.common import write_output

    nested = tmp_path / "new" / "folder" / "out.jsonl"
    write_output(nested, ["a", "b"])
    assert nested.read_text() == "a\nb\n"
    with pytest.raises(RealmError, match="expected a file to write, found a directory"):
        write_output(tmp_path / "new", ["x"])

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(RealmError, match="No space left on device.*nothing was written"):
        write_output(tmp_path / "full.jsonl", ["x"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]  # no temp file, no partial output


def test_a_full_disk_during_a_stage_is_an_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     shared_data: Path) -> None:
    from realm_core.store import artifacts

    def full(self: artifacts.TableWriter, data: object) -> None:  # a part file that no longer fits
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.directory / "part-00000.parquet"))

    monkeypatch.setattr(artifacts.TableWriter, "write", full)
    code, output = realm("ingest", "--preset", "tiny", "--root", str(tmp_path / "art"))
    assert code == 2 and "No space left on device; nothing partial was published" in output, output
    assert not (tmp_path / "art" / "documents").exists()
    assert list((tmp_path / "art" / ".tmp").iterdir()) == []  # the scratch directory went too


def test_prefect_home_is_made_with_its_parents_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows import prefect_home

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "a" / "b" / "prefect"))
    assert Path(prefect_home()).is_dir()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "file" / "prefect"))
    with pytest.raises(RealmError, match="PREFECT_HOME=.*file/prefect: cannot create it"):
        prefect_home()


def test_a_bad_override_fails_before_prefect_starts(tmp_path: Path) -> None:
    home = tmp_path / "missing" / "prefect"
    code, output = realm("pipeline", "--preset", "tiny", "--set", "chunk.max_wordpieces=many",
                         "--root", str(tmp_path / "art"), env={"PREFECT_HOME": str(home)})
    assert code == 2 and "error:" in output and "max_wordpieces" in output and "Traceback" not in output
    assert not home.exists()  # Prefect was never started


def test_serve_qa_on_a_port_that_cannot_exist(tmp_path: Path) -> None:
    code, output = realm("serve-qa", "--port", "99999", "--root", str(tmp_path / "art"))
    assert code == 2 and "--port 99999: expected a TCP port, 1 to 65535" in output


@pytest.mark.slow
def test_a_failing_pipeline_prints_its_error_line_and_no_prefect_traceback(tmp_path: Path) -> None:
    """A bad source file deep in a Prefect run: the output is the `error:` line (Prefect's
    tracebacks only under --verbose), exit 2, no artifact."""
    import subprocess
    import sys

    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": 1, "title": "t", "text": "fine"}\n{"id": 2, "title": \n')
    cmd = [sys.executable, "-m", "flows.cli", "pipeline", "--preset", "tiny", "--config",
           str(_jsonl_config(tmp_path, corpus)), "--root", str(tmp_path / "art")]
    # PREFECT_HOME under folders that do not exist yet: made with its parents
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "new" / "home" / "prefect"), "COLUMNS": "400"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    both = r.stdout + r.stderr
    assert r.returncode == 2 and f"error: {corpus} at line 2: expected a JSON object" in both, both[-3000:]
    assert "Traceback" not in both and not (tmp_path / "art" / "documents").exists()
    r = subprocess.run([*cmd, "--verbose"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 2 and "Traceback" in r.stdout + r.stderr


def test_pickled_weights_are_refused(tiny_bert: str, tmp_path: Path) -> None:
    """Only safetensors are loaded: a directory holding pytorch_model.bin alone (a pickle, which a
    load would execute) is a ConfigError naming it, not transformers' OSError."""
    from transformers import BertModel

    from realm_core.retrieval.encoders import RetrieverEncoder

    pickled = tmp_path / "pickled"
    BertModel.from_pretrained(tiny_bert, use_safetensors=True).save_pretrained(pickled, safe_serialization=False)
    assert (pickled / "pytorch_model.bin").is_file() and not (pickled / "model.safetensors").exists()
    with pytest.raises(ConfigError, match="expected model.safetensors .* found pytorch_model.bin"):
        RetrieverEncoder.from_pretrained(str(pickled))


def test_bm25_searches_a_corpus_smaller_than_max_k(tmp_path: Path) -> None:
    """A user's own five documents: k is clamped to the corpus, `-k 1` returns one hit."""
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": f"{t} is a city on a river."}) + "\n"
                              for i, t in enumerate(["Warsaw", "Krakow", "Gdansk", "Poznan", "Lodz"])))
    args = ["--preset", "tiny", "--config", str(_jsonl_config(tmp_path, corpus)), "--root", str(tmp_path / "art")]
    code, output = realm("chunk", *args)
    assert code == 0, output
    code, output = realm("search", "Gdansk river", "-k", "1", "--retriever", "bm25", "--json", *args)
    assert code == 0, output
    assert [h["title"] for h in json.loads(output)["hits"]] == ["Gdansk"]
    code, output = realm("search", "Gdansk river", "-k", "100", "--retriever", "bm25", "--json", *args)
    assert code == 0 and len(json.loads(output)["hits"]) == 5, output
