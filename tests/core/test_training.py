from pathlib import Path

import pytest
import torch
from torch import nn

from realm_core.errors import ArtifactError
from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    read_checkpoint,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
    step_seed,
)


def test_warmup_then_linear_decay() -> None:
    lrs = [learning_rate_at(s, 1.0, 4, 12) for s in range(13)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4] == 1.0 and lrs[8] == 0.5 and lrs[12] == 0.0
    assert learning_rate_at(0, 2.0, 0, 10) == 2.0


def test_step_seed_is_a_function_of_seed_step_and_stream() -> None:
    assert step_seed(0, 5) == step_seed(0, 5)
    assert len({step_seed(0, 5), step_seed(1, 5), step_seed(0, 6), step_seed(0, 5, 1)}) == 4


def test_adamw_excludes_bias_and_layernorm_from_decay() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    groups = adamw([model], 1e-3, 0.01).param_groups
    assert [len(g["params"]) for g in groups] == [1, 3]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]


def test_learning_rate_scales_per_module() -> None:
    reader, retriever = nn.Linear(3, 4), nn.Linear(3, 4)
    opt = adamw([reader, retriever], 1e-3, 0.01, lr_scales=[1.0, 0.1])
    set_learning_rate(opt, 2e-3)
    rates = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert rates[id(reader.weight)] == rates[id(reader.bias)] == 2e-3
    assert rates[id(retriever.weight)] == rates[id(retriever.bias)] == pytest.approx(2e-4)
    before = retriever.weight.detach().clone(), reader.weight.detach().clone()
    opt.zero_grad()
    (reader(torch.ones(1, 3)).sum() + retriever(torch.ones(1, 3)).sum()).backward()
    opt.step()  # Adam's first step moves each weight by about its learning rate
    moved_retriever = (retriever.weight - before[0]).abs().max().item()
    moved_reader = (reader.weight - before[1]).abs().max().item()
    assert moved_retriever == pytest.approx(moved_reader / 10, rel=0.05)


def _trained(steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = adamw([model], 0.1, 0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.ones(3, 4)).pow(2).sum().backward()
        opt.step()
    return model, opt


def test_checkpoint_round_trip_restores_weights_and_optimizer(tmp_path: Path) -> None:
    model, opt = _trained(3)
    save_checkpoint(tmp_path, 3, {"m": model}, opt, {"position": 7})
    fresh, fresh_opt = _trained(0)
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.step == 3 and ckpt.state["position"] == 7
    restore_checkpoint(ckpt, {"m": fresh}, fresh_opt)
    assert torch.equal(fresh.weight, model.weight)
    # one more step on each gives identical parameters: the Adam moments came back too
    for m, o in ((model, opt), (fresh, fresh_opt)):
        o.zero_grad()
        m(torch.ones(3, 4)).pow(2).sum().backward()
        o.step()
    assert torch.equal(fresh.weight, model.weight)


def test_only_the_newest_checkpoints_are_kept_and_no_temp_dirs_remain(tmp_path: Path) -> None:
    model, opt = _trained(1)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"m": model}, opt, {}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002", "step-00000003"]
    assert latest_checkpoint(tmp_path / "missing") is None


def test_an_altered_checkpoint_is_refused(tmp_path: Path) -> None:
    model, opt = _trained(1)
    path = save_checkpoint(tmp_path, 1, {"m": model}, opt, {})
    (path / "m.safetensors").write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match=r"m.safetensors: checkpoint file missing or altered"):
        latest_checkpoint(tmp_path)
    with pytest.raises(ArtifactError, match=r"m.safetensors: checkpoint file missing or altered"):
        read_checkpoint(path)  # a checkpoint named by hand is verified the same way


def test_progress_rate_reads_for_fast_and_slow_units() -> None:
    from realm_core.progress import rate_text

    assert rate_text(615, 50.0, "blocks") == "12.3 blocks/s"
    # 23 of 150 ICT steps in 11 minutes: the rate is 0.03 steps/s, which "%.1f" printed as 0.0
    assert rate_text(23, 660.0, "steps", 150) == "one per 28.7 s, about 61 min left"
    assert rate_text(140, 70.0, "steps", 150) == "2.0 steps/s, about 5 s left"
    assert rate_text(0, 3.0, "steps", 150) == "3 s, none done yet"
    assert rate_text(150, 75.0, "steps", 150) == "2.0 steps/s"  # done: no time left to announce


def test_a_resumed_loop_is_timed_from_its_first_new_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run resumed at step 275 of 600 advances by 275 at once; at 10 s a step, 325 steps are left,
    about 54 min, not the 70 s that counting the restored steps as done in no time announced."""
    from realm_core import progress

    clock = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    rate = progress.Rate("steps", 600)
    rate.advance(275)  # restored from the checkpoint
    for _ in range(5):
        clock[0] += 10.0
        rate.advance(1)
    assert rate.done == 280
    assert rate.text() == "one per 10.0 s, about 53 min left"
    fresh = progress.Rate("steps", 600)  # from step 0, the first step is timed from the start
    clock[0] += 10.0
    fresh.advance(1)
    assert fresh.text() == "one per 10.0 s, about 100 min left"


def test_a_loop_stopped_for_an_hour_reads_its_true_pace_five_minutes_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """600 ICT steps at 2.5 s each, stopped for an hour (Ctrl-Z) after step 100. Until 5 minutes
    after it continues the window holds the stop; from then on it reads the true pace, where the
    average since the first step still announced "one per 18.9 s, about 119 min left" (379
    steps at 2.5 s are 16 min)."""
    from realm_core import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    rate = progress.Rate("steps", 600)

    def steps(n: int, seconds: float) -> None:
        for _ in range(n):
            clock[0] += seconds
            rate.advance(1)

    steps(100, 2.5)
    assert rate.text() == "one per 2.5 s, about 21 min left"
    clock[0] += 3600.0  # stopped
    steps(120, 2.5)  # 300 s since it continued: the stop is still in the window
    assert rate.text() == "one per 32.3 s, about 204 min left"
    steps(1, 2.5)
    assert rate.done == 221
    assert rate.text() == "one per 2.5 s, about 16 min left"


def test_periodic_evaluation_stays_in_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of 2 s with a 30 s dev evaluation after every 20th (3.5 s a step on average): from
    the first full window on, the time left stays within 10% of the truth at every step, where a
    moving average of single steps (tqdm's smoothing 0.3) reads about 3x too long after each
    evaluation."""
    from realm_core import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    rate = progress.Rate("steps", 1000)
    per_step = []
    for step in range(1, 600):
        clock[0] += 2.0 + (30.0 if step > 1 and (step - 1) % 20 == 0 else 0.0)
        rate.advance(1)
        if clock[0] > progress.Rate.WINDOW_S:
            text = rate.text()
            assert text.startswith("one per "), text
            per_step.append(float(text.split()[2]))
    assert per_step and all(3.5 * 0.9 <= s <= 3.5 * 1.1 for s in per_step), (min(per_step), max(per_step))


def test_an_evaluation_between_pause_and_resume_is_left_out_of_the_rate(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """1,000 REALM steps of 8 s with a 7-minute held-out evaluation after step 500. Inside the
    window the evaluation once read "one per 413 s, about 3436 min left"; paused, the step after
    it reads the steps' own pace, and the log says what the loop is doing meanwhile."""
    import logging

    from realm_core import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    log = progress.LogProgress(logging.getLogger("realm.test"), every=0.0)
    log.start("REALM pretraining", 1000, "steps")
    for _ in range(500):
        clock[0] += 8.0
        log.advance(1)
    with caplog.at_level(logging.INFO, logger="realm.test"):
        log.pause("held-out evaluation at step 500 (1,500 masked spans)")
        clock[0] += 420.0
        log.resume()
        clock[0] += 8.0
        log.advance(1)
    assert log.rate.text() == "one per 8.0 s, about 67 min left"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["REALM pretraining: held-out evaluation at step 500 (1,500 masked spans)",
                     "REALM pretraining: held-out evaluation at step 500 (1,500 masked spans) took 7 min "
                     "(left out of the rate)",
                     "REALM pretraining: 501/1000 steps (one per 8.0 s, about 67 min left)"]
    unpaused = progress.Rate("steps", 1000)  # the same run without the pause: the window holds the evaluation
    for _ in range(500):
        clock[0] += 8.0
        unpaused.advance(1)
    clock[0] += 428.0
    unpaused.advance(1)
    assert unpaused.text() == "one per 428.0 s, about 3560 min left"


def test_a_fast_loop_keeps_a_bounded_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 blocks a second in 10,000 advances over 100 s: the window keeps at most one mark per
    3 s (100 a window), and its rate is exact."""
    from realm_core import progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    rate = progress.Rate("blocks", None)
    for _ in range(100_000):
        clock[0] += 0.01
        rate.advance(1)
    assert len(rate.marks) <= 101
    assert rate.text() == "100.0 blocks/s"
