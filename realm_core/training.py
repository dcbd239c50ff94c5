"""Training machinery shared by the warm starts and REALM pretraining: BERT's AdamW parameter
groups, the warm-up + linear-decay schedule, per-step seeding, atomic checkpoints, and the warm
starts' per-step bookkeeping, and `publish_trained`, the one way a training stage publishes.

A checkpoint is a directory `step-NNNNNNNN/` holding one `<name>.safetensors` per module, the
optimizer's tensors in `optimizer.safetensors` and everything else (step, data position, index
version, param groups, file hashes) in `state.json`. It is written to a temp directory and
renamed, so after `kill -9` at any moment the newest `step-*` directory is complete. Never pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from realm_core.errors import ArtifactError
from realm_core.store.artifacts import sha256_file

if TYPE_CHECKING:
    from realm_core.progress import Progress
    from realm_core.store.artifacts import StageResult
    from realm_core.store.cache import CachedStage

STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


def adamw(modules: Sequence[nn.Module], learning_rate: float, weight_decay: float,
          lr_scales: list[float] | None = None) -> torch.optim.AdamW:
    """AdamW with BERT's exclusions: no weight decay on biases and LayerNorm weights.

    `lr_scales[i]` multiplies the learning rate of `modules[i]`; each group records its scale
    as `lr_scale`, which the training loops apply to the scheduled rate (see `set_learning_rate`)."""
    scales = lr_scales or [1.0] * len(modules)
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module, scale in zip(modules, scales, strict=True):
        for name, p in module.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            decays = not (p.ndim < 2 or "LayerNorm" in name or "norm" in name)
            groups.setdefault((scale, decays), []).append(p)
    return torch.optim.AdamW([{"params": params, "weight_decay": weight_decay if decays else 0.0,
                               "lr_scale": scale}
                              for (scale, decays), params in groups.items()],
                             lr=learning_rate, betas=(0.9, 0.999), eps=1e-6)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The scheduled rate times each parameter group's `lr_scale`."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def learning_rate_at(step: int, peak: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to `peak`, then linear decay to 0 at `total_steps` (BERT, REALM)."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    remaining = max(total_steps - warmup_steps, 1)
    return peak * max(0.0, (total_steps - step) / remaining)


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """A seed for one (run seed, step, stream): data order and dropout are functions of the step,
    so a resumed run draws exactly what the uninterrupted run would have drawn."""
    digest = hashlib.sha256(f"{seed}:{step}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass
class Checkpoint:
    path: Path
    step: int
    state: dict[str, Any]


def _checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def save_checkpoint(root: Path, step: int, modules: dict[str, nn.Module],
                    optimizer: torch.optim.Optimizer, state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoint `step` atomically under `root`; keep only the newest `keep`."""
    from safetensors.torch import save_file, save_model

    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{step:08d}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for name, module in modules.items():
            save_model(module, str(tmp / f"{name}.safetensors"))
        opt = optimizer.state_dict()
        tensors: dict[str, torch.Tensor] = {}
        for index, slots in opt["state"].items():
            for slot, value in slots.items():
                tensors[f"state.{index}.{slot}"] = torch.as_tensor(value).detach().contiguous()
        save_file(tensors, str(tmp / OPTIMIZER_FILE))
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        record = {"step": step, "modules": sorted(modules), "param_groups": opt["param_groups"],
                  "files": files, **state}
        (tmp / STATE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))
        final = _checkpoint_dir(root, step)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for old in sorted(root.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def record_step(point: Any, curve: list[Any], config: Any, progress: Progress,
                on_log: Callable[[Any], None] | None, checkpoint_root: Path, modules: dict[str, nn.Module],
                optimizer: torch.optim.Optimizer) -> None:
    """A warm-start loop's bookkeeping after step `point.step` (a dataclass point): the point on
    the curve, the progress bar, `on_log` every `config.log_every` steps and a resumable
    checkpoint (the curve and the seed in its state) every `config.checkpoint_every`, both at the
    last of `config.steps` too."""
    done, last = point.step, point.step == config.steps
    curve.append(point)
    progress.advance(1)
    if on_log is not None and (done % config.log_every == 0 or last):
        on_log(point)
    if done % config.checkpoint_every == 0 or last:
        save_checkpoint(checkpoint_root, done, modules, optimizer,
                        {"curve": [p.__dict__ for p in curve], "seed": config.seed})


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest complete checkpoint under `root`, verified against its recorded hashes."""
    candidates = sorted(root.glob("step-*")) if root.is_dir() else []
    return read_checkpoint(candidates[-1]) if candidates else None


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint in `path` (a `step-*` directory), verified against its recorded hashes:
    `ArtifactError` naming the file that is missing or altered."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path / STATE_FILE}: corrupt checkpoint state ({e}); "
                            "remove the directory to resume from the one before") from None
    for name, digest in state.get("files", {}).items():
        if not (path / name).is_file() or sha256_file(path / name) != digest:
            raise ArtifactError(f"{path / name}: checkpoint file missing or altered "
                                "(sha256 differs); remove the directory to resume from the one before")
    return Checkpoint(path, int(state["step"]), state)


def restore_checkpoint(checkpoint: Checkpoint, modules: dict[str, nn.Module],
                       optimizer: torch.optim.Optimizer) -> None:
    """Load module weights and optimizer state saved by `save_checkpoint` (in place)."""
    from safetensors.torch import load_file, load_model

    for name, module in modules.items():
        try:
            missing, unexpected = load_model(module, str(checkpoint.path / f"{name}.safetensors"),
                                             strict=False)
        except (OSError, RuntimeError) as e:
            raise ArtifactError(f"{checkpoint.path / name}.safetensors: cannot load ({e})") from None
        if missing or unexpected:
            raise ArtifactError(f"{checkpoint.path / name}.safetensors: does not match the model "
                                f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    tensors = load_file(str(checkpoint.path / OPTIMIZER_FILE))
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, slot = key.split(".", 2)
        slots.setdefault(int(index), {})[slot] = value
    try:
        optimizer.load_state_dict({"state": slots, "param_groups": checkpoint.state["param_groups"]})
    except (ValueError, KeyError) as e:
        raise ArtifactError(f"{checkpoint.path / OPTIMIZER_FILE}: does not match the optimizer ({e})") from None


class Plot(NamedTuple):
    """A curve plotted into a published artifact: `ys` against `x` over `rows`, as `file` (PNG)."""

    file: str
    rows: Sequence[dict[str, Any]]
    x: str
    ys: Sequence[str]
    title: str


def publish_trained(cache: CachedStage, *, manifest: Mapping[str, Any], reader: Any = None, tokenizer: Any = None,
                    encoders: Mapping[str, Any] | None = None, tokenizer_source: str = "",
                    tables: Mapping[str, Sequence[dict[str, Any]]] | None = None, plot: Plot | None = None,
                    barrier: Callable[[], None] | None = None) -> StageResult:
    """The one way a training stage publishes its artifact: the reader as a Hugging Face folder
    `reader/` with the blocks' tokenizer beside it, each retriever encoder as `<name>/` (its
    tokenizer from `tokenizer_source`), each curve table, the plot, and `manifest` (stats, report,
    anything else the stage records) in the manifest; every model is saved from the CPU in eval
    mode. Under torchrun rank 0 calls it and `barrier` is where the other ranks, waiting for its
    artifact, meet it."""
    with cache.write() as out:
        if reader is not None:
            reader.cpu().eval().save_pretrained(out.tmp / "reader")
            tokenizer.save_pretrained(str(out.tmp / "reader"))
        for name, encoder in (encoders or {}).items():
            encoder.cpu().eval().save_pretrained(out.tmp / name, tokenizer_source=tokenizer_source)
        for name, rows in (tables or {}).items():
            out.table(name).write(list(rows))
        if plot is not None:
            from realm_core.curves import plot_curves

            plot_curves(plot.rows, plot.x, plot.ys, out.file(plot.file), plot.title)
        out.extra_manifest.update(manifest)
    if barrier is not None:
        barrier()
    return cache.result()
