"""Data parallelism on 2 CPU processes (torchrun, gloo): a single-process REALM pretraining run
killed mid-way resumes on 2 ranks and ends as the uninterrupted run did, and open-QA fine-tuning
on 2 ranks trains like 1 process with the same global batch."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from safetensors.torch import load_file

from tests.conftest import PRETRAIN_SETTINGS, one_artifact, realm_pretrain

pytestmark = pytest.mark.slow


WEIGHTS = ("reader/model.safetensors", "query_encoder/model.safetensors", "doc_encoder/model.safetensors",
           "doc_encoder/projection.safetensors")


def _assert_same_weights(a: Path, b: Path) -> None:
    for part in WEIGHTS:
        wa, wb = load_file(str(a / part)), load_file(str(b / part))
        assert wa.keys() == wb.keys()
        worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
        assert worst < 1e-4, f"{part}: max |difference| {worst}"


def _upstream_copy(root: Path, dest: Path) -> Path:
    """The same upstream artifacts (blocks, spans, ICT, the reader's warm-up), none of the
    pretraining run's outputs."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns("realm_model", "runs", "checkpoints"))
    return dest


def test_a_killed_single_process_run_resumes_on_two_ranks_along_its_loss_curve(tiny_pretrained: Path,
                                                                               tmp_path: Path) -> None:
    """One process trains steps 1-2 and dies in step 3; two gloo ranks resume from step 2's
    checkpoint, refresh the index before step 3 (rank 0 rebuilds it, both switch) and end with the
    uninterrupted one-process run's losses and weights: DDP averages the ranks' gradients into
    the global batch's, and a checkpoint resumes on any number of processes."""
    from realm_core.blocks import run_chunk
    from realm_core.config import load_config
    from realm_core.ingest.stage import run_ingest
    from realm_core.pretrain.stage import run_pretrain
    from realm_core.retrieval.warm_start import run_warm_start_ict
    from realm_core.spans.mining import run_mine_spans
    from realm_core.store.artifacts import ArtifactStore
    from realm_core.training import STATE_FILE
    from tests.killing import KillAfter, Killed

    root = _upstream_copy(tiny_pretrained, tmp_path / "resumed")
    cfg = load_config("tiny", None, PRETRAIN_SETTINGS)
    store = ArtifactStore(root)  # the upstream stages are cache hits here
    blocks = run_chunk(store, run_ingest(store, cfg.ingest).ref, cfg.chunk)
    spans = run_mine_spans(store, blocks.ref, cfg.spans)
    ict = run_warm_start_ict(store, blocks.ref, spans.ref, cfg.ict)
    with pytest.raises(Killed):  # after step 3: step 2's checkpoint is on disk, step 3's is not
        run_pretrain(store, blocks.ref, spans.ref, ict.ref, cfg.pretrain, cfg.masking, cfg.embed, cfg.index,
                     KillAfter(3))
    assert not list(root.glob("realm_model/*"))  # a killed run publishes nothing
    (checkpoint,) = (root / "checkpoints").glob("realm_model-*")
    assert sorted(p.name for p in checkpoint.glob("step-*")) == ["step-00000002"]
    killed_seconds = json.loads((checkpoint / "step-00000002" / STATE_FILE).read_text())["curves"]["seconds"]
    resumed = realm_pretrain(root, "--nproc", "2")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    a, b = one_artifact(tiny_pretrained, "realm_model"), one_artifact(root, "realm_model")
    stats_a = json.loads((a / "manifest.json").read_text())["stats"]
    stats_b = json.loads((b / "manifest.json").read_text())["stats"]
    assert (stats_a["world_size"], stats_b["world_size"]) == (1, 2)
    # the resumed run says where it resumed, and its wall time counts the steps it kept from the killed part
    assert (stats_a["resumed_at_steps"], stats_b["resumed_at_steps"]) == ([], [2])
    # the reader warm-up is the one-process run's, copied with the upstream, not trained again
    assert {k: v for k, v in stats_b["reader_mlm"].items() if k != "artifact"} == \
        {k: v for k, v in stats_a["reader_mlm"].items() if k != "artifact"}
    curve_a = pq.read_table(a / "pretrain_metrics").to_pylist()
    curve_b = pq.read_table(b / "pretrain_metrics").to_pylist()  # steps 1-2 travelled in the checkpoint
    assert [r["step"] for r in curve_a] == [r["step"] for r in curve_b] == [1.0, 2.0, 3.0, 4.0]
    assert stats_b["wall_seconds"] >= round(killed_seconds + sum(1.0 / r["steps_per_s"] for r in curve_b[2:]), 1)
    for ra, rb in zip(curve_a, curve_b, strict=True):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4)
        assert rb["p_null"] == pytest.approx(ra["p_null"], abs=1e-4)
        assert rb["index_step"] == ra["index_step"]
    assert curve_b[-1]["index_step"] > curve_b[1]["index_step"]  # both ranks switched before step 3
    _assert_same_weights(a, b)
    # the held-out rows the last eval scored are the same (the two ranks score half each)
    rows_a = pq.read_table(a / "pretrain_heldout").to_pylist()
    rows_b = pq.read_table(b / "pretrain_heldout").to_pylist()
    assert len(rows_a) == len(rows_b) > 0
    for ra, rb in zip(rows_a, rows_b, strict=True):
        assert ra.keys() == rb.keys()
        for k, v in ra.items():
            assert rb[k] == (pytest.approx(v, rel=1e-4, abs=1e-4) if isinstance(v, float) else v), k


def _finetune(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "flows.cli", "finetune", "--preset", "tiny", "--root", str(root),
                           "--system", "ict", "--set", "finetune.batch_size=4", "--set", "finetune.steps=3",
                           *extra], capture_output=True, text=True, env=env, timeout=900)


def test_two_gloo_ranks_fine_tune_like_one_process(tiny_pretrained: Path, tmp_path: Path) -> None:
    one = _upstream_copy(tiny_pretrained, tmp_path / "one")
    done = _finetune(one)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the gold-passage reader is trained by rank 0 alone before the ranks
    # start; what runs on two ranks is the open-domain phase
    two = tmp_path / "two"
    shutil.copytree(one, two, ignore=shutil.ignore_patterns("openqa_model", "checkpoints"))
    done = _finetune(two, "--nproc", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = one_artifact(one, "openqa_model"), one_artifact(two, "openqa_model")
    stats_a = json.loads((a / "manifest.json").read_text())["stats"]
    stats_b = json.loads((b / "manifest.json").read_text())["stats"]
    assert (stats_a["world_size"], stats_b["world_size"]) == (1, 2)
    # both came from the cache of the copied root (their keys hold the encoders' content, not
    # their paths): the same stats, wall seconds included
    assert stats_a["gold_passage"] is not None and stats_b["gold_passage"] == stats_a["gold_passage"]
    curve_a = pq.read_table(a / "finetune_curve").to_pylist()
    curve_b = pq.read_table(b / "finetune_curve").to_pylist()
    assert [r["questions"] for r in curve_a] == [r["questions"] for r in curve_b]
    trained = [(ra["loss"], rb["loss"]) for ra, rb in zip(curve_a, curve_b, strict=True) if ra["loss"] == ra["loss"]]
    assert len(trained) >= 2  # steps with a gold span to learn from
    for la, lb in trained:
        assert lb == pytest.approx(la, rel=1e-4)
    for part in ("reader/model.safetensors", "reader/span_head.safetensors", "query_encoder/model.safetensors"):
        wa, wb = load_file(str(a / part)), load_file(str(b / part))
        worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
        assert worst < 1e-4, f"{part}: max |difference| {worst}"
