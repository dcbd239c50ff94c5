"""How a stage is run: `Resolver` resolves a stage's upstream first and calls its runner through a
hook (`call_directly` here, a Prefect task in the flows), each stage once, and records a
`StageRun` (artifact, cache hit, stats, seconds, peak memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from realm_core.config import PipelineConfig
from realm_core.errors import CorruptArtifactError
from realm_core.graph.stages import (
    PIPELINE_TARGETS,
    JobMap,
    RefreshIndex,
    Stage,
    StageInputs,
    closure,
    required_ref,
    stage,
)
from realm_core.progress import NoProgress, Progress
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult


@dataclass
class StageRun:
    """A resolved stage: its artifact (None when the stage is off), cache hit or not, its stats,
    the wall seconds of this call, the report's markdown and the config sections it read."""

    stage: str
    ref: ArtifactRef | None
    cached: bool
    stats: dict[str, Any]
    seconds: float
    report: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    peak_rss_mb: float | None = None  # this process's resident memory at its largest during the call

    def summary(self) -> dict[str, Any]:
        return {"artifact": self.ref.path if self.ref else None, "cached": self.cached,
                "seconds": round(self.seconds, 2), "peak_rss_mb": self.peak_rss_mb, "stats": self.stats}


Hook = Callable[[Stage, StageInputs], StageRun]


def call_directly(stage: Stage, inputs: StageInputs) -> StageRun:
    """The plain hook: run the stage in this process, timed and its memory measured."""
    return measured_run(stage.name, stage.config(inputs.cfg), lambda: stage.run(inputs))


def measured_run(name: str, config: dict[str, Any], run: Callable[[], StageResult | None]) -> StageRun:
    """The StageRun of one stage call `run()`: its wall seconds and this process's peak resident
    memory during it (`PeakMemory`) beside what it returned (None: the stage is off). What the
    stage frees is handed back to the system while it runs (`TrimmedHeap`) and after it
    (`release_free_memory`)."""
    from realm_core.memory import PeakMemory, TrimmedHeap, release_free_memory

    with PeakMemory() as peak, TrimmedHeap():
        t0 = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - t0
    release_free_memory()  # what the stage freed is not carried into the next one's peak
    if result is None:
        return StageRun(name, None, True, {"skipped": "off in this config"}, seconds, "", config, peak.mb)
    return StageRun(name, result.ref, result.cached, result.stats, seconds, result.report, config, peak.mb)


class Resolver:
    """Stages of one config over one store, each resolved once (memoised) through the cache.

    `hook` calls a runner (`call_directly`, or a Prefect task); `force` names the stages to
    recompute although cached; `progress` makes each stage's progress reporter;
    `refresh_index` is what pretraining calls at every index refresh (default: in process)."""

    def __init__(self, cfg: PipelineConfig, store: ArtifactStore, hook: Hook = call_directly,
                 force: Iterable[str] = (), progress: Callable[[], Progress] = NoProgress,
                 refresh_index: RefreshIndex | None = None, map_jobs: JobMap | None = None) -> None:
        self.cfg, self.store, self.hook = cfg, store, hook
        self.force = set(force)
        self.progress, self.refresh_index, self.map_jobs = progress, refresh_index, map_jobs
        self.runs: dict[str, StageRun] = {}

    def inputs(self, name: str) -> StageInputs:
        """The runner's inputs of stage `name`, its upstream resolved."""
        s = stage(name)
        refs = {u: self.run(u).ref for u in s.upstream(self.cfg)}
        return StageInputs(s.runs_on(self.cfg), self.store, refs, self.progress(), name in self.force,
                           self.map_jobs if s.fans_out else None, self.refresh_index)

    def run(self, name: str) -> StageRun:
        """Stage `name` through the cache, its upstream first. Under torchrun a distributed stage
        (pretraining, fine-tuning) runs on every rank; any other runs on rank 0 first and the
        other ranks then find it in the cache."""
        if name not in self.runs:
            s = stage(name)
            inputs = self.inputs(name)  # each upstream stage placed by its own kind
            try:
                if s.distributed:
                    self.runs[name] = self.hook(s, inputs)
                else:
                    with self._rank_zero_first():
                        self.runs[name] = self.hook(s, inputs)
            except CorruptArtifactError as e:
                if e.stage is not None:
                    raise
                raise CorruptArtifactError(e.path, e.what, name) from None
        return self.runs[name]

    def _rank_zero_first(self) -> Any:
        import contextlib
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return contextlib.nullcontext()
        from realm_core.distributed import Placement, rank_zero_first

        return rank_zero_first(Placement.from_env(self.cfg.pretrain.device))

    def ref(self, name: str) -> ArtifactRef:
        return required_ref({name: self.run(name).ref}, name)

    def pipeline(self, targets: Iterable[str] = PIPELINE_TARGETS) -> dict[str, StageRun]:
        """Every stage the targets need, in order."""
        return {name: self.run(name) for name in closure(self.cfg, targets)}

