"""The training loop REALM's reader is trained by outside pretraining: the masked-LM warm-up
(`reader_mlm`) and copy training on evidence blocks (`reading`). Each gives the loss of one step;
this loop owns the rest: AdamW with BERT's schedule, resuming from the newest checkpoint, the
progress bar, gradient clipping, the finite-loss check, the curve and checkpoints every
`checkpoint_every` steps and at the last, and (where the caller gives one) an evaluation every
`eval_every` steps whose metrics join that step's row of the curve.

A step's batch (and its dropout) is a function of (seed, step) inside the step's loss, so a run
killed at any step and resumed draws exactly what the uninterrupted run would have drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
)


class ReaderSchedule(Protocol):
    """The fields of a reader training config the loop reads (a frozen config or dataclass)."""

    @property
    def steps(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def warmup_steps(self) -> int: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def checkpoint_every(self) -> int: ...


# one step's loss and the metrics to record beside it (e.g. accuracy), given the 0-based step
StepLoss = Callable[[int], tuple[torch.Tensor, dict[str, float]]]
# metrics of the reader given, as it stands (in eval mode, without gradient), e.g. held-out accuracy
Evaluate = Callable[[Any], dict[str, float]]


def train_reader_steps(reader: Any, config: ReaderSchedule, step_loss: StepLoss, checkpoint_root: Path,
                       progress: Any, placement: Any, what: str, if_not_finite: str,
                       evaluate: Evaluate | None = None, eval_every: int = 0) -> list[dict[str, float]]:
    """Train `reader` in place for `config.steps` steps of `step_loss`, resuming from the newest
    checkpoint under `checkpoint_root`; the curve: one row per step (step, loss, the step's
    metrics, learning rate), and every `eval_every` steps and at the last `evaluate`'s metrics in
    that step's row (its batches and dropout untouched: each step seeds its own). `what` names
    the run on the progress bar and in errors; `if_not_finite` says what to do when a loss is not
    finite."""
    if evaluate is not None and eval_every < 1:
        raise ValueError(f"{what}: an evaluation needs eval_every >= 1, got {eval_every}")
    reader.to(placement.device)
    reader.train()
    optimizer = adamw([reader], config.learning_rate, config.weight_decay)
    curve: list[dict[str, float]] = []
    start = 0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, {"reader": reader}, optimizer)
        start, curve = ckpt.step, ckpt.state["curve"]
    progress.start(what, config.steps, "steps")
    progress.advance(start)
    for step in range(start, config.steps):
        lr = learning_rate_at(step, config.learning_rate, config.warmup_steps, config.steps)
        set_learning_rate(optimizer, lr)
        optimizer.zero_grad(set_to_none=True)
        loss, metrics = step_loss(step)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(reader.parameters(), config.max_grad_norm)
        optimizer.step()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{what}, step {step + 1}: loss is {loss.item()}; {if_not_finite}")
        curve.append({"step": float(step + 1), "loss": loss.item(), **metrics, "learning_rate": lr})
        progress.advance(1)
        done = step + 1
        if evaluate is not None and (done % eval_every == 0 or done == config.steps):
            progress.pause(f"evaluation at step {done}")
            reader.eval()
            with torch.no_grad():
                curve[-1].update(evaluate(reader))
            reader.train()
            progress.resume()
        if done % config.checkpoint_every == 0 or done == config.steps:
            save_checkpoint(checkpoint_root, done, {"reader": reader}, optimizer, {"curve": curve})
    progress.finish()
    reader.eval()
    return curve
