"""Progress reporting without a UI dependency: the CLI plugs in rich bars, Prefect tasks a logger."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Protocol


class Progress(Protocol):
    def start(self, description: str, total: int | None, unit: str) -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def finish(self) -> None: ...


class NoProgress:
    def start(self, description: str, total: int | None, unit: str) -> None:
        pass

    def advance(self, n: int = 1) -> None:
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
    the count over the time since the start (a fresh loop's first step is timed from there)."""

    WINDOW_S = 300.0

    def __init__(self, unit: str, total: int | None) -> None:
        self.unit, self.total, self.done = unit, total, 0
        self.t0 = self.last = time.monotonic()  # start, latest advance
        self.marks: deque[tuple[float, int]] = deque()  # (time, count); the first opens the window

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
        self.description = ""
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

    def finish(self) -> None:
        self._log()
