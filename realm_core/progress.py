"""Progress reporting without a UI dependency: the CLI plugs in rich bars, Prefect tasks a logger."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from pathlib import Path
from typing import Protocol


class Progress(Protocol):
    """One loop at a time: `start`, `advance` per unit, `finish`. Work a loop does aside from its
    units (a held-out evaluation every few hundred steps) goes between `pause(what)` and `resume()`:
    it is announced, and its time is kept out of the loop's rate and time left."""

    def start(self, description: str, total: int | None, unit: str) -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def pause(self, what: str) -> None: ...
    def resume(self) -> None: ...
    def finish(self) -> None: ...


class NoProgress:
    def start(self, description: str, total: int | None, unit: str) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def pause(self, what: str) -> None:
        pass

    def resume(self) -> None:
        pass

    def finish(self) -> None:
        pass


def rate_text(done: int, elapsed: float, unit: str, total: int | None = None) -> str:
    """"12.3 blocks/s", or "one per 28.6 s" for slow units such as training steps, and the time
    left when the total is known, at the average rate of `done` units in `elapsed` seconds."""
    if done == 0:
        return f"{elapsed:.0f} s, none done yet"
    return pace_text(done, done / elapsed, unit, total)


def pace_text(done: int, rate: float, unit: str, total: int | None = None) -> str:
    """`rate_text` at a given rate (units a second), such as a recent average."""
    text = f"{rate:.1f} {unit}/s" if rate >= 1 else f"one per {1 / rate:.1f} s"
    if total and done < total:
        left = (total - done) / rate
        text += f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left"
    return text


class Rate:
    """Count, rate and time left of one loop.

    The rate is the units over the last `WINDOW_S` seconds of advances, not since the start: a
    run stopped for an hour (Ctrl-Z, SIGSTOP) reads its true pace again 5 minutes after it
    continues, where the whole-run average announced hours left to the end of the run. Five
    minutes holds the periodic work inside a loop (a dev evaluation every few dozen steps, a
    checkpoint), so the time left does not jump after each; a moving average of single advances
    (tqdm's smoothing) jumps several-fold after every one. The window is kept as marks of
    (time, count), at most one per `WINDOW_S / 100` seconds, so a fast loop keeps about 100.

    A loop that resumes from a checkpoint advances by the restored units before its first new one
    (`progress.advance(start)`), so the first advance opens the window and is not timed: 275
    restored steps do not read as 275 steps done in no time. Until a second advance, the rate is
    the count over the time since the start (a fresh loop's first step is timed from there).

    Time between `pause()` and `resume()` (an evaluation inside a training loop) is not the loop's:
    every mark moves forward by it, so the rate after a 7-minute evaluation is the steps' own,
    where the window once read one step in 7 minutes and hours left."""

    WINDOW_S = 300.0

    def __init__(self, unit: str, total: int | None) -> None:
        self.unit, self.total, self.done = unit, total, 0
        self.t0 = self.last = time.monotonic()  # start, latest advance
        self.marks: deque[tuple[float, int]] = deque()  # (time, count); the first opens the window
        self.paused_at: float | None = None

    def pause(self) -> None:
        if self.paused_at is None:
            self.paused_at = time.monotonic()

    def resume(self) -> float:
        """Leave the pause out of the rate; returns its seconds."""
        if self.paused_at is None:
            return 0.0
        gap, self.paused_at = time.monotonic() - self.paused_at, None
        self.t0, self.last = self.t0 + gap, self.last + gap
        self.marks = deque((t + gap, count) for t, count in self.marks)
        return gap

    def advance(self, n: int) -> None:
        now = self.last = time.monotonic()
        self.done += n
        if not self.marks or now - self.marks[-1][0] >= self.WINDOW_S / 100:
            self.marks.append((now, self.done))
        while len(self.marks) > 1 and now - self.marks[1][0] >= self.WINDOW_S:
            self.marks.popleft()  # the next mark alone spans the window

    def text(self) -> str:
        if self.marks and self.done > self.marks[0][1]:
            since, count = self.marks[0]
            return pace_text(self.done, (self.done - count) / max(self.last - since, 1e-9), self.unit, self.total)
        return rate_text(self.done, max(time.monotonic() - self.t0, 1e-9), self.unit, self.total)


class LogProgress:
    """Logs count and rate at most every `every` seconds (a Prefect run log stays readable)."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 every: float = 10.0) -> None:
        self.logger = logger
        self.every = every
        self.description = self.pausing = ""
        self.rate = Rate("", None)
        self.last = time.monotonic()

    def start(self, description: str, total: int | None, unit: str) -> None:
        self.description, self.rate = description, Rate(unit, total)
        self.last = time.monotonic()

    def _log(self) -> None:
        r = self.rate
        of = f"/{r.total}" if r.total else ""
        self.logger.info("%s: %d%s %s (%s)", self.description, r.done, of, r.unit, r.text())

    def advance(self, n: int = 1) -> None:
        self.rate.advance(n)
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._log()

    def pause(self, what: str) -> None:
        self.pausing = what
        self.rate.pause()
        self.logger.info("%s: %s", self.description, what)

    def resume(self) -> None:
        gap = self.rate.resume()
        self.logger.info("%s: %s took %s (left out of the rate)", self.description, self.pausing, _duration(gap))
        self.last = time.monotonic()

    def finish(self) -> None:
        self._log()


class PipelineEta:
    """One progress line for a whole pipeline run: stages done of the plan, time elapsed, and
    the time left as the sum of each remaining stage's seconds when it was last computed on this
    store (`history`, a small JSON file updated as each stage is computed). A stage that turns out to be
    a cache hit takes no time, so the estimate is for the rest computed; a stage never computed
    here has no time yet, and the line says how many of those remain."""

    def __init__(self, plan: list[str], history: Path | None, shipped: dict[str, float] | None = None) -> None:
        self.plan, self.history = list(plan), history
        self.t0 = time.monotonic()
        # a fresh store estimates from the stage times the project measured for this preset
        # (`shipped`, its bench/results record); this store's own times replace them
        self.shipped = dict(shipped or {})
        self.known: dict[str, float] = {}
        if history is not None and history.is_file():
            try:
                self.known = {k: float(v) for k, v in json.loads(history.read_text()).items()}
            except (ValueError, TypeError, AttributeError):
                self.known = {}  # an unreadable record only costs the estimate
        self.finished: dict[str, tuple[bool, float]] = {}  # stage: (computed, seconds)

    def record(self, stage: str, computed: bool, seconds: float) -> None:
        """A planned stage is done; a computed one's time is kept at once, so a run killed in a
        later stage and started again estimates from the stages it already computed."""
        if stage in self.plan and stage not in self.finished:
            self.finished[stage] = (computed, seconds)
            if computed:
                self.save()

    def left(self) -> tuple[float, int]:
        """Seconds the remaining stages took when last computed, and how many have no time."""
        rest = [s for s in self.plan if s not in self.finished]
        times = self.shipped | self.known
        return sum(times.get(s, 0.0) for s in rest), sum(s not in times for s in rest)

    def fraction(self) -> float:
        """Share of the run done, weighted by the stages' known times (by count where none are)."""
        left, _ = self.left()
        elapsed = time.monotonic() - self.t0
        if left + elapsed <= 0:
            return len(self.finished) / max(len(self.plan), 1)
        return min(1.0, elapsed / (elapsed + left))

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        text = f"pipeline: {len(self.finished)}/{len(self.plan)} stages, {_duration(elapsed)} elapsed"
        rest = len(self.plan) - len(self.finished)
        if rest == 0:
            return text + ", done"
        left, unknown = self.left()
        if unknown == rest:
            return text + f", {_count(rest, 'stage')} to go (no time left yet: none has been computed on this store)"
        where = "their last computed times" if not self.shipped or all(
            s in self.known for s in self.plan if s not in self.finished) else "the times the project measured"
        text += f", about {_duration(left)} left at {where}"
        return text + (f" (and {_count(unknown, 'stage')} never computed here)" if unknown else "")

    def save(self) -> None:
        """Keep each computed stage's seconds for the next run's estimate (hits keep the old time)."""
        if self.history is None:
            return
        known = self.known | {s: round(sec, 1) for s, (computed, sec) in self.finished.items() if computed}
        self.history.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.history.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.history)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
