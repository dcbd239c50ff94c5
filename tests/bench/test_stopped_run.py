"""experiments/stopped_run.py: a stopped run's curve from its newest checkpoint, windowed as a
finished run's, and a clear error where no checkpoint is."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from realm_core.training import adamw, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))

import stopped_run  # noqa: E402


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    written: dict[str, Any] = {}
    monkeypatch.setattr(stopped_run, "write_result", lambda name, result: written.update({name: result}))
    monkeypatch.setattr(sys, "argv", ["stopped_run.py", *args])
    stopped_run.main()
    return written


def test_the_newest_checkpoint_is_windowed_and_a_missing_one_exits_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = adamw([model], 1e-3, 0.0)
    steps = [{"step": float(s), "retriever_trained": float(s > 2), "span_accuracy": s / 10, "retrieval_utility": -s,
              "p_null": 0.125, "answer_retrieved": 1 / s} for s in range(1, 5)]
    for done in (2, 4):
        save_checkpoint(tmp_path / "ckpt", done, {"m": model}, optimizer,
                        {"curves": {"steps": steps[:done], "evals": [], "heldout": []}})
    out = _main(monkeypatch, "--checkpoints", str(tmp_path / "ckpt"), "--name", "stopped", "--commit", "abc",
                "--what", "a run", "--window", "2")["stopped"]
    assert out["stopped_at"] == 4 and out["retriever_trained_from_step"] == 3 and out["commit"] == "abc"
    windows = out["curve"]["training"]
    assert [(w["first_step"], w["last_step"], w["retriever_trained"]) for w in windows] == [(1, 2, 0.0), (3, 4, 1.0)]
    assert windows[1]["span_accuracy"] == pytest.approx(0.35) and windows[0]["retrieval_utility"] == -1.5
    with pytest.raises(SystemExit) as stop:
        _main(monkeypatch, "--checkpoints", str(tmp_path / "none"), "--name", "x", "--commit", "a", "--what", "b")
    assert stop.value.code == 2 and capsys.readouterr().err.startswith("error: ")


def test_a_run_that_logged_the_holders_weight_shows_it_as_their_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """p_holder (mean p(z|x) on span-holding blocks, 0 where none is retrieved) is windowed where
    the run logged it and rendered over answer_retrieved: the holders' share where one was."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from readme_tables import _run_curve_table

    model = torch.nn.Linear(2, 2)
    steps = [{"step": float(s), "retriever_trained": 1.0, "span_accuracy": 0.1, "retrieval_utility": 0.0,
              "p_null": 0.125, "answer_retrieved": 0.5, "p_holder": 0.1 * s} for s in range(1, 5)]
    save_checkpoint(tmp_path / "ckpt", 4, {"m": model}, adamw([model], 1e-3, 0.0),
                    {"curves": {"steps": steps, "evals": [], "heldout": []}})
    out = _main(monkeypatch, "--checkpoints", str(tmp_path / "ckpt"), "--name", "w", "--commit", "abc",
                "--what", "a run", "--window", "2")["w"]
    assert [w["p_holder"] for w in out["curve"]["training"]] == pytest.approx([0.15, 0.35])
    table = _run_curve_table("a run", out["curve"])
    assert table[2].endswith("retrieval weight on its holders (%) |")
    assert table[4].endswith("| 30.0 |") and table[5].endswith("| 70.0 |")  # 0.15 / 0.5, 0.35 / 0.5
    # a run from before p_holder was logged renders as it did
    old = [{k: v for k, v in r.items() if k != "p_holder"} for r in steps]
    save_checkpoint(tmp_path / "old", 4, {"m": model}, adamw([model], 1e-3, 0.0),
                    {"curves": {"steps": old, "evals": [], "heldout": []}})
    before = _main(monkeypatch, "--checkpoints", str(tmp_path / "old"), "--name", "o", "--commit", "abc",
                   "--what", "a run", "--window", "2")["o"]
    assert "p_holder" not in before["curve"]["training"][0]
    assert "holders" not in "\n".join(_run_curve_table("a run", before["curve"]))


def test_a_finished_run_is_read_from_its_artifact_verified_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that ran to its end has no checkpoints left: its published artifact's curve tables
    give the same view, and an altered artifact is refused (exit 2)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from readme_tables import stopped_run_table

    from realm_core.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path / "artifacts")
    steps = [{"step": s, "loss": 1.0, "span_accuracy": 0.1 * s, "log_likelihood": -1.0, "p_null": 0.125,
              "retrieval_utility": 0.5, "answer_retrieved": 0.5, "p_holder": 0.2, "learning_rate": 1e-4,
              "index_step": 0, "staleness": s, "steps_per_s": 1.0, "blocked_s": 0.0,
              "retriever_trained": float(s > 2)} for s in range(1, 5)]
    evals = [{"step": 4, "span_accuracy": 0.3, "log_likelihood": -2.0, "p_null": 0.125, "retrieval_utility": 0.4,
              "answer_retrieved": 0.4, "p_holder": 0.1, "examples": 10}]
    with store.write("realm_model", "r" * 20, config={"steps": 4}, config_hash="h", inputs={}) as out:
        out.table("pretrain_metrics").write(steps)
        out.table("pretrain_eval").write(evals)
    run = store.path("realm_model", "r" * 20)
    kept = _main(monkeypatch, "--run", run, "--name", "f", "--commit", "abc", "--what", "a run", "--window", "2")["f"]
    assert kept["finished_at"] == 4 and "stopped_at" not in kept and kept["retriever_trained_from_step"] == 3
    assert [w["span_accuracy"] for w in kept["curve"]["training"]] == pytest.approx([0.15, 0.35])
    assert kept["curve"]["heldout"][0]["span_accuracy"] == pytest.approx(0.3)
    assert stopped_run_table(kept).endswith("The run: the encoders trained from step 3; ran to its last step, 4, "
                                            "trained at abc.")
    next(Path(run, "pretrain_eval").glob("*.parquet")).write_bytes(b"altered")
    with pytest.raises(SystemExit) as stop:
        _main(monkeypatch, "--run", run, "--name", "f", "--commit", "abc", "--what", "a run")
    assert stop.value.code == 2 and capsys.readouterr().err.startswith(f"error: {run}/pretrain_eval/")
