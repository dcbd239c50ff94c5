"""The REALM recipe as stages on the tiny corpus: the reader warm start (copying a span from a
block that holds it) never reads a held-out article and resumes after a kill to the same artifact;
REALM and null-only read the same batches; the laptop preset runs end to end at tiny budgets."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from realm_core.config import load_config
from realm_core.graph.stages import null_only
from realm_core.pretrain.heldout import is_heldout
from realm_core.pretrain.loop import batch_picks
from realm_core.pretrain.reader_copy import run_reader_copy
from realm_core.pretrain.stage import pretrain_data
from realm_core.retrieval.stage import encoder_hash
from realm_core.spans.mining import open_mined
from realm_core.store.artifacts import ArtifactRef, ArtifactStore
from tests.conftest import TinyUpstream
from tests.killing import KillAfter, Killed

pytestmark = pytest.mark.slow

COPY = ["pretrain.reader_copy.steps=4", "pretrain.reader_copy.batch_size=2", "pretrain.reader_copy.eval_every=2",
        "pretrain.reader_copy.checkpoint_every=2", "pretrain.heldout_every=3"]


def _copy(upstream: TinyUpstream, dest: Path) -> tuple[ArtifactStore, dict[str, ArtifactRef]]:
    root, _, refs = upstream
    shutil.copytree(root, dest)
    return ArtifactStore(dest), {k: ArtifactRef(r.kind, r.path.replace(str(root), str(dest)), r.content_hash)
                                 for k, r in refs.items()}


def _reader_copy(store: ArtifactStore, refs: dict[str, ArtifactRef], progress=None):  # type: ignore[no-untyped-def]
    cfg = load_config("tiny", None, COPY)
    start = cfg.pretrain.reader_encoder
    return cfg, run_reader_copy(store, refs["blocks"], refs["spans"], refs["ict"], start, encoder_hash(start),
                                cfg.pretrain, cfg.masking, cfg.embed, progress)


def test_reader_warm_start_never_reads_a_held_out_article(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    store, refs = _copy(tiny_upstream, tmp_path / "a")
    cfg, result = _reader_copy(store, refs)
    art = store.open(result.ref, kind="reader_copy")
    rows = art.read_table("reader_copy_examples").to_pylist()
    blocks = store.open(refs["blocks"]).read_table("blocks", ["block_id", "doc_id"]).to_pylist()
    doc_of = {r["block_id"]: r["doc_id"] for r in blocks}
    every = cfg.pretrain.heldout_every
    assert rows and result.stats["recoverable_heldout"] > 0
    # neither the trained examples nor the blocks they were read with come from a held-out article
    assert not any(is_heldout(r["doc_id"], every) for r in rows)
    assert not any(is_heldout(doc_of[r["evidence_block"]], every) for r in rows)
    assert any(is_heldout(d, every) for d in doc_of.values())  # there were held-out articles to avoid
    curve = art.read_table("reader_copy_metrics").to_pylist()
    assert [r["step"] for r in curve] == [1, 2, 3, 4]
    assert [np.isnan(r["heldout_oracle_accuracy"]) for r in curve] == [True, False, True, False]
    assert "oracle - null" in art.manifest["report"]


def test_a_killed_reader_warm_start_resumes_to_the_same_artifact(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    straight_store, refs = _copy(tiny_upstream, tmp_path / "straight")
    _, straight = _reader_copy(straight_store, refs)
    store, refs = _copy(tiny_upstream, tmp_path / "killed")
    with pytest.raises(Killed):
        _reader_copy(store, refs, KillAfter(3))  # after step 3, its last checkpoint step 2
    _, resumed = _reader_copy(store, refs)
    assert resumed.ref.path.rsplit("/", 1)[1] == straight.ref.path.rsplit("/", 1)[1]  # the same key
    a = load_file(Path(straight.ref.path) / "reader" / "model.safetensors")
    b = load_file(Path(resumed.ref.path) / "reader" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_realm_and_null_only_read_the_same_batches(tiny_upstream: TinyUpstream) -> None:
    _, cfg, refs = tiny_upstream
    store = ArtifactStore(tiny_upstream[0])
    blocks, spans = open_mined(store, refs["blocks"], refs["spans"])
    pair = {}
    for name, c in (("REALM", cfg), ("null only", null_only(cfg))):
        data = pretrain_data(blocks, spans, c.pretrain, c.masking)
        pair[name] = [[(data.train[i].doc_id, data.train[i].block_id, tuple(data.train[i].input_ids))
                       for i in batch_picks(c.pretrain, step, len(data.train))] for step in range(6)]
        pair[name + " held out"] = [(e.doc_id, e.block_id) for e in data.heldout]
    assert cfg.pretrain.retrieval == "realm" and null_only(cfg).pretrain.retrieval == "null_only"
    assert pair["REALM"] == pair["null only"] and pair["REALM held out"] == pair["null only held out"]
    assert len({tuple(b) for b in pair["REALM"]}) == 6  # each step its own batch


def test_laptop_preset_runs_end_to_end_at_tiny_budgets(shared_data: Path, tmp_path: Path) -> None:
    """The laptop preset itself over the tiny corpus, every budget cut: the reader warm start,
    REALM and null-only, their comparison, and Table 1 with the open-domain phase."""
    tiny = load_config("tiny")
    budgets = tmp_path / "tiny-budgets.yaml"
    budgets.write_text(json.dumps({
        "ingest": tiny.ingest.model_dump(mode="json"), "questions": tiny.questions.model_dump(mode="json"),
        "retrieval_eval": tiny.retrieval_eval.model_dump(mode="json"), "block_length": 128,
        "masking": {"query_length": 32}, "precision": "fp32", "spans": {"n_process": 1}, "embed": {"batch_size": 16},
        "ict": {"batch_size": 8, "micro_batch": 0, "steps": 2, "block_length": 64},
        "pretrain": {"reader_length": 159, "top_k": 3, "batch_size": 2, "steps": 3, "warmup_steps": 1,
                     "retriever_frozen_steps": 1, "refresh_every": 2, "sync_refresh": True, "heldout_every": 3,
                     "eval_examples": 6, "eval_every": 3, "checkpoint_every": 2,
                     "reader_mlm": {"steps": 2, "batch_size": 4, "length": 64, "warmup_steps": 1},
                     "reader_copy": {"steps": 2, "batch_size": 2, "warmup_steps": 1, "eval_every": 2}},
        "gain": {"resamples": 200},
        "finetune": {"top_k": 2, "reader_length": 96, "question_length": 32, "batch_size": 2, "steps": 2,
                     "eval_every": 2, "dev_questions": 8, "warmup_steps": 1, "checkpoint_every": 2,
                     "gold_passage": {"steps": 2, "batch_size": 4, "eval_every": 2, "warmup_steps": 1}},
        "openqa_eval": {"question_limits": {"squad-open": 12}, "answer_candidates": 5, "batch_size": 4,
                        "temperatures": [1.0], "calibration_questions": 8, "bootstrap_resamples": 200}}))
    env = {**os.environ, "REALM_WORK_DIR": str(tmp_path / "work"), "PREFECT_HOME": str(tmp_path / "prefect")}
    run = subprocess.run([sys.executable, "-m", "flows.cli", "pipeline", "--preset", "laptop", "--config", str(budgets)],
                         capture_output=True, text=True, env=env, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    root = tmp_path / "work" / "artifacts"
    for kind in ("reader_copy", "realm_gain", "openqa_eval"):
        assert any((p / "manifest.json").is_file() for p in (root / kind).iterdir()), kind
    models = [json.loads((p / "manifest.json").read_text()) for p in (root / "realm_model").iterdir()
              if (p / "manifest.json").is_file()]
    assert sorted(m["stats"]["retrieval"] for m in models) == ["null_only", "realm"]
    # both runs start from the reader warm start's artifact, not the masked-LM warm-up's
    assert {m["stats"]["reader_mlm"]["kind"] for m in models} == {"reader_copy"}
    gain = json.loads(next(p for p in (root / "realm_gain").iterdir() if (p / "manifest.json").is_file())
                      .joinpath("manifest.json").read_text())
    assert gain["stats"]["heldout"]["examples"] == 6 and "REALM - null-only" in gain["report"]
    evaluated = json.loads(next(p for p in (root / "openqa_eval").iterdir() if (p / "manifest.json").is_file())
                           .joinpath("manifest.json").read_text())
    assert "squad-open EM REALM" in evaluated["stats"] and "squad-open EM ICT (ORQA-like)" in evaluated["stats"]
    # the run's own record, and `realm record` writing it again from the artifacts alone
    record = json.loads((tmp_path / "work" / "reports" / "record-laptop.json").read_text())
    assert {"wall_seconds", "precision", "cpu", "stages", "heldout", "zero_shot", "openqa"} <= set(record)
    assert set(record["heldout"]["gain"]) == {"accuracy_delta", "accuracy_ci95", "recoverable_delta", "recoverable_ci95"}
    assert record["heldout"]["examples"] == 6 and record["stages"]["pretrain"] > 0
    squad = record["openqa"]["squad-open"]
    assert {"BM25 + reader", "ICT (ORQA-like)", "REALM"} <= set(squad["systems"])
    assert "REALM - ICT (ORQA-like)" in squad["paired"] and "mcnemar_p" in squad["paired"]["REALM - ICT (ORQA-like)"]
    again = subprocess.run([sys.executable, "-m", "flows.cli", "record", "--preset", "laptop", "--config", str(budgets),
                            "--json", str(tmp_path / "laptop.json")], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads((tmp_path / "laptop.json").read_text())["heldout"] == record["heldout"]
    # README's Table 1 and its REALM sentence render from that record
    import bench_tables

    table, sentence = bench_tables.laptop_table(record), bench_tables.laptop_gain(record)
    assert "| REALM | " in table and "| ICT (ORQA-like) | " in table and "| REALM - ICT (ORQA-like) | " in table
    assert "McNemar p" in table and "REALM minus null-only on 6 held-out masked spans" in sentence
