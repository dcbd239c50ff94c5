"""The `realm` command as a user runs it: real processes, exit codes, no partial artifacts (the
query side's bad-input cases run the same app in this process)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app
from realm_core.bert import resolve_encoder_dir
from realm_core.config import BUNDLED_ENCODER
from tests.conftest import TinyUpstream, one_artifact

pytestmark = pytest.mark.slow
REALM = [sys.executable, "-m", "flows.cli"]


def realm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    code = "from flows.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_ingest_chunk_inspect_on_tiny(shared_data: Path, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    r = realm("chunk", "--preset", "tiny", "--root", root, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # stderr is a pipe here, not a terminal: progress comes as timestamped lines, not a bar
    assert re.search(r"^\d\d:\d\d:\d\d .+: \d+.* \(.+\)$", r.stderr, re.M), r.stderr
    blocks_dir = one_artifact(tmp_path / "art", "blocks")
    r = realm("inspect", str(blocks_dir), "--rows", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"kind": "blocks"' in r.stdout and "blocks: 612 rows" in r.stdout
    r = realm("chunk", "--preset", "tiny", "--root", root, cwd=tmp_path)
    assert "blocks (cached)" in r.stdout


def test_bad_input_exits_nonzero_naming_the_file(tmp_path: Path) -> None:
    cut = tmp_path / "dump.xml.bz2"
    import bz2

    page = b"<page><title>A</title><ns>0</ns><id>1</id><revision><text>Some text.</text></revision></page>"
    cut.write_bytes(bz2.compress(b"<mediawiki>" + page * 5000)[:300])
    r = realm("ingest", "--source", f"wikipedia:{cut}", "--root", str(tmp_path / "art"), cwd=tmp_path)
    assert r.returncode == 2
    # bz2 may hand expat a clean prefix: the error then comes from the XML end, still "truncated"
    assert "dump.xml.bz2 at " in r.stderr and "truncated" in r.stderr
    assert not (tmp_path / "art" / "documents").exists()


def test_help_teaches(tmp_path: Path) -> None:
    r = realm("ingest", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--source" in r.stdout and "KIND:PATH" in r.stdout


def test_config_prints_resolved_values(tmp_path: Path) -> None:
    r = realm("config", "--preset", "paper", "--set", "pretrain.top_k=5", cwd=tmp_path)
    assert r.returncode == 0
    cfg = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    assert cfg["pretrain"]["top_k"] == 5 and cfg["pretrain"]["batch_size"] == 512


def test_two_concurrent_runs_into_one_root_do_not_corrupt(shared_data: Path, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    code = "from flows.cli import main; main()"
    env = dict(os.environ, COLUMNS="200")
    procs = [subprocess.Popen([sys.executable, "-c", code, "mine-spans", "--preset", "tiny",
                               "--root", root], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    for kind in ("documents", "blocks", "salient_spans"):
        published = list((tmp_path / "art" / kind).glob("*/manifest.json"))
        assert len(published) == 1, kind  # one copy per key, whoever finished first
    assert not any((tmp_path / "art" / ".tmp").iterdir())
    r = realm("inspect", str(published[0].parent), cwd=tmp_path)
    assert r.returncode == 0 and "salient_spans" in r.stdout


def test_warm_start_then_null_only_pretraining_from_the_command_line(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    """From a copy of the tiny upstream (ingest to ICT computed once a session), so `realm
    warm-start` reports its cached ICT artifact; the CLI computes stages in the other tests."""
    root = str(tmp_path / "art")
    shutil.copytree(tiny_upstream[0], root)
    r = realm("warm-start", "--method", "ict", "--preset", "tiny", "--root", root, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "retriever (ICT)" in r.stdout and "ICT loss curve" in r.stdout
    # the encoder is keyed by its content, not its path: a copy elsewhere is the same warm start
    moved = tmp_path / "minilm-copy"
    shutil.copytree(resolve_encoder_dir(BUNDLED_ENCODER), moved)
    r = realm("warm-start", "--method", "ict", "--preset", "tiny", "--root", root, "--set", f"ict.encoder={moved}",
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "retriever (ICT) (cached)" in r.stdout
    r = realm("pretrain", "--preset", "tiny", "--root", root, "--retrieval", "null_only",
              "--set", "pretrain.steps=2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "REALM model (null_only)" in r.stdout and "held-out masked salient spans" in r.stdout
    _null_only_reader_behind_ict(root, tmp_path)
    r = realm("warm-start", "--method", "mae", "--preset", "tiny", "--root", root, cwd=tmp_path)
    assert r.returncode == 2 and "expected 'ict' or 'retromae'" in r.stderr
    r = realm("pretrain", "--preset", "tiny", "--root", root, "--set", "pretrain.warm_start=retromae",
              "--set", "pretrain.steps=2", "--set", "retromae.steps=2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "art" / "retriever").iterdir())
    methods = sorted(json.loads((d / "manifest.json").read_text())["method"] for d in runs)
    assert methods == ["ict", "retromae"]


def test_finetune_and_evaluate_open_qa_from_the_command_line(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    shutil.copytree(tiny_upstream[0], root)  # its blocks a cache hit; the ingest and chunk commands run above
    r = realm("evaluate", "--preset", "tiny", "--root", root, "--system", "none", "--system", "bm25",
              "--json", str(tmp_path / "qa.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fine-tuned BM25 + reader" in r.stdout and "answerable EM" in r.stdout
    result = json.loads((tmp_path / "qa.json").read_text())
    squad = result["results"]["squad-open"]
    assert set(squad["systems"]) == {"gold paragraph reader", "no retrieval", "BM25 + reader"}
    assert squad["questions"] == 12
    assert squad["systems"]["no retrieval"] == {"EM": 0.0, "EM answerable": 0.0, "F1": 0.0, "R@2": 0.0,
                                                "R@2 read": 0.0, "form": "joint", "temperature": "uniform"}
    # the gold paragraph reader reads each question's own paragraph: its recall is 1 by construction
    assert squad["systems"]["gold paragraph reader"]["R@2"] == 1.0
    assert set(squad["paired"]) == {"gold paragraph reader - BM25 + reader"}
    paired = squad["paired"]["gold paragraph reader - BM25 + reader"]
    assert paired["ci95"][0] <= paired["delta"] <= paired["ci95"][1] and 0 <= paired["mcnemar_p"] <= 1
    # the baselines' span readers start from the encoder itself (finetune.reader_start=encoder)
    assert {s["reader_start"] for s in result["systems"]} == {"bundled:all-MiniLM-L6-v2"}
    assert result["budget"]["BM25 + reader"]["gold_passage"]["examples_seen"] > 0
    # the gold phase's dev EM at each evaluation, the best of which is the checkpoint kept
    gold = result["gold_reader"]
    assert gold["dev_curve"] and max(em for _, em in gold["dev_curve"]) == gold["best_dev_em"]
    assert [gold["best_step"], gold["best_dev_em"]] in gold["dev_curve"]
    assert result["warm_starts"] == result["warm_start_configs"] == {}  # no dense retriever here
    assert result["peak_rss_gb"]["process"] > 0.1
    predictions = one_artifact(tmp_path / "art", "openqa_eval") / "openqa_predictions"
    assert any(predictions.glob("*.parquet"))
    # each question's outcome per system, as the predictions table has it: the file pairs with
    # another run (experiments/paired_runs.py) after the artifact is gone
    kept = result["outcomes"]["squad-open"]
    rows = [r for r in pq.read_table(predictions).to_pylist() if r["dataset"] == "squad-open"]
    assert len(kept["qids"]) == 12 and set(kept["correct"]) == set(squad["systems"])
    assert sorted((r["system"], r["qid"], "1" if r["correct"] else "0") for r in rows) == sorted(
        (system, q, marks[i]) for system, marks in kept["correct"].items() for i, q in enumerate(kept["qids"]))
    r = realm("finetune", "--preset", "tiny", "--root", root, "--system", "bm25", cwd=tmp_path)
    assert r.returncode == 0 and "(cached)" in r.stdout, r.stdout
    _search_and_ask(root, tmp_path)
    # the gold-paragraph phase is a stage of its own: listed, and recomputed alone with --force
    # (after the query side: forcing it moves the key of every system fine-tuned from it)
    r = realm("stages", "--preset", "tiny", cwd=tmp_path)
    assert "gold_reader" in r.stdout and "gold_reader_realm" in r.stdout, r.stdout
    gold_dir = one_artifact(tmp_path / "art", "qa_reader")
    before = json.loads((gold_dir / "manifest.json").read_text())["created_at"]
    r = realm("finetune", "--preset", "tiny", "--root", root, "--system", "bm25", "--phase", "gold", "--force",
              cwd=tmp_path)
    assert r.returncode == 0 and "gold-paragraph reader, from the baseline reader" in r.stdout, r.stdout
    assert "fine-tuned BM25" not in r.stdout  # the open phase was not asked for
    assert json.loads((gold_dir / "manifest.json").read_text())["created_at"] != before
    r = realm("finetune", "--preset", "tiny", "--root", root, "--phase", "third", cwd=tmp_path)
    assert r.returncode == 2 and "--phase third: expected gold, open or both" in r.stderr
    r = realm("evaluate", "--preset", "tiny", "--root", root, "--system", "t5", cwd=tmp_path)
    assert r.returncode == 2 and "expected one of none, bm25, ict, realm" in r.stderr


def _null_only_reader_behind_ict(root: str, tmp_path: Path) -> None:
    """ICT's encoders behind two readers (the baseline's and the null-only run's): two systems,
    and the null-only reader is the run `realm pretrain --retrieval null_only` just wrote (stage
    pretrain_null resolves the same config)."""
    r = realm("finetune", "--preset", "tiny", "--root", root, "--system", "ict", "--system", "ict_null_reader",
              "--set", "pretrain.steps=2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    art = tmp_path / "art"
    realm_model = one_artifact(art, "realm_model")
    models = [json.loads((d / "manifest.json").read_text()) for d in (art / "openqa_model").iterdir()]
    assert sorted(m["system"]["key"] for m in models) == ["ict", "ict_null_reader"]
    assert all(m["stats"]["gold_passage"] is not None for m in models)
    null_reader = next(m for m in models if m["system"]["key"] == "ict_null_reader")["system"]["reader"]
    assert null_reader.startswith(str(realm_model))


def _search_and_ask(root: str, tmp_path: Path) -> None:
    """The query side on the artifacts `realm evaluate` left: documented JSON fields, batch files
    that round-trip, bad input exiting 2."""
    tiny = ["--preset", "tiny", "--root", root]
    r = realm("search", "Warsaw capital of the Polish-Lithuanian Commonwealth", "-k", "3", "--json",
              "--retriever", "bm25", *tiny, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found["retriever"] == "bm25" and [h["rank"] for h in found["hits"]] == [1, 2, 3]
    assert set(found["hits"][0]) == {"rank", "block_id", "score", "title", "snippet"}
    assert found["hits"][0]["title"] == "Warsaw" and found["hits"][0]["score"] >= found["hits"][1]["score"]
    r = realm("ask", "What was Warsaw the capital of until 1796?", "--json", *tiny, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    # the evaluation above fit only BM25 + reader: it is the default, and the output says why
    assert answer["system_key"] == "bm25" and "newest evaluation" in answer["system_choice"]
    assert 0.0 <= answer["probability"] <= 1.0 and answer["block_id"] in answer["block_ids"]
    text = answer["block_text"]
    assert text[answer["char_start"]:answer["char_end"]] == answer["answer"]
    batch = tmp_path / "questions.jsonl"
    batch.write_text(json.dumps({"id": "q1", "question": "Who returned to Warsaw on 11 November?",
                                 "answers": ["Piłsudski"]}) + "\nWhere is the Vistula?\n")
    r = realm("ask", "--questions", str(batch), "--out", str(tmp_path / "pred.jsonl"), "--system", "bm25", *tiny,
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert [row["qid"] for row in rows] == ["q1", "2"] and rows[0]["answers"] == ["Piłsudski"]
    assert isinstance(rows[0]["correct"], bool) and rows[1]["correct"] is None
    assert {"question", "predicted", "score", "block_ids", "f1", "system"} <= set(rows[0])
    r = realm("search", "--queries", str(batch), "--out", str(tmp_path / "hits.jsonl"), "-k", "2",
              "--retriever", "bm25", *tiny, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    hits = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [len(h["hits"]) for h in hits] == [2, 2]
    for args, message in ((["search", ""], "empty query"), (["search", "x", "-k", "0"], "k=0"),
                          (["search", "x" * 1001], "the limit is query.max_query_chars=1,000"),
                          (["search", "x", "--retriever", "tfidf"], "retriever 'tfidf'"),
                          (["search", "x"], "no index built yet"),  # evaluate built none: BM25 needs no index
                          (["ask", "x", "--system", "t5"], "system 't5'"),
                          (["ask", "--questions", str(batch)], "needs --out"),
                          (["ask"], "give one question")):
        # in this process (the same app, exit code and message; no interpreter start per case)
        r = CliRunner().invoke(app, [*args, *tiny], env={"COLUMNS": "200"})
        assert r.exit_code == 2 and message in r.stderr, (args, r.output)
