"""bench/gpu_run.py, the GPU session's one command, run on the CPU at tiny size: the gpu preset with
the tiny corpus and every budget cut by `--set`, the mechanism experiment small, bench/gpu.py's
export and its ICT loop in check mode (its full measurement takes many minutes on a CPU). The
same code path a lent GPU runs; each result file written, and a second call skips what is done."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from realm_core.config import load_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_command_runs_on_the_cpu_with_budgets_cut(shared_data: Path, tmp_path: Path) -> None:
    tiny = load_config("tiny")
    sets = {"ingest.sources": [s.model_dump(mode="json") for s in tiny.ingest.sources],
            "questions.sources": [s.model_dump(mode="json") for s in tiny.questions.sources],
            "retrieval_eval.squad_articles": [1, 2], "precision": "fp32", "block_length": 128,
            "masking.query_length": 32, "spans.n_process": 1, "embed.batch_size": 16,
            "ict.batch_size": 8, "ict.steps": 2, "ict.block_length": 64,
            "pretrain.reader_length": 159, "pretrain.top_k": 3, "pretrain.batch_size": 2, "pretrain.steps": 3,
            "pretrain.warmup_steps": 1, "pretrain.retriever_frozen_steps": 1, "pretrain.refresh_every": 2,
            "pretrain.sync_refresh": True, "pretrain.heldout_every": 3, "pretrain.eval_examples": 6,
            "pretrain.eval_every": 3, "pretrain.reader_mlm.steps": 2, "pretrain.reader_mlm.batch_size": 4,
            "pretrain.reader_mlm.length": 64, "pretrain.reader_copy.steps": 2, "pretrain.reader_copy.batch_size": 2,
            "pretrain.reader_copy.eval_every": 2, "gain.resamples": 200}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    mechanism = ("--entities 60 --distractors 10 --set pretrain.steps=2 --set pretrain.eval_every=2 "
                 "--set pretrain.eval_examples=8 --set pretrain.reader_mlm.steps=2 --set pretrain.top_k=2 "
                 "--set precision=fp32 --systems REALM")
    out = tmp_path / "results"
    env = {**os.environ, "REALM_WORK_DIR": str(tmp_path / "work"), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "bench" / "gpu_run.py"), "--preset", "gpu", *args,
               "--mechanism-args", mechanism, "--bench-args", "--max-blocks 64 --steps 1 --shape MiniLM --only-ict", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    pair = json.loads((out / "gpu_pair.json").read_text())
    assert pair["preset"] == "gpu" and pair["pretrain_steps"] == 3 and pair["device"].startswith("cpu")
    assert {"reader_copy", "pretrain", "pretrain_null", "realm_gain"} <= set(pair["stages"])
    assert pair["gain"]["heldout"]["examples"] == 6
    assert "REALM" in json.loads((out / "realm_mechanism_gpu.json").read_text())["systems"]
    assert (out / "gpu.json").is_file()
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and "pretraining pair:" in again.stdout
    assert json.loads((out / "gpu_pair.json").read_text()) == pair  # done steps are skipped, not redone
