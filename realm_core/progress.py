"""Progress reporting without a UI dependency: the CLI plugs in rich bars, Prefect tasks a logger."""

from __future__ import annotations

import logging
import time
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


def rate_text(done: int, elapsed: float, unit: str, total: int | None = None, timed: int | None = None) -> str:
    """"12.3 blocks/s", or "one per 28.6 s" for slow units such as training steps, and the time
    left when the total is known. `timed`: how many of the `done` units `elapsed` covers (all of
    them unless some came from a checkpoint)."""
    timed = done if timed is None else timed
    if timed == 0:
        return f"{elapsed:.0f} s, none done yet"
    rate = timed / elapsed
    text = f"{rate:.1f} {unit}/s" if rate >= 1 else f"one per {1 / rate:.1f} s"
    if total and done < total:
        left = (total - done) / rate
        text += f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left"
    return text


class Rate:
    """Count, rate and time left of one loop. A loop that resumes from a checkpoint advances by
    the restored units before its first new one (`progress.advance(start)`), so the rate is timed
    from the first advance: 275 restored steps do not read as 275 steps done in no time."""

    def __init__(self, unit: str, total: int | None) -> None:
        self.unit, self.total, self.done = unit, total, 0
        self.t0 = time.monotonic()
        self.first: tuple[float, int] | None = None  # (time, count) at the first advance

    def advance(self, n: int) -> None:
        if self.first is None:
            self.first = (time.monotonic(), n)
        self.done += n

    def text(self) -> str:
        now = time.monotonic()
        if self.first is not None and self.done > self.first[1]:
            return rate_text(self.done, max(now - self.first[0], 1e-9), self.unit, self.total,
                             timed=self.done - self.first[1])
        return rate_text(self.done, max(now - self.t0, 1e-9), self.unit, self.total)


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
