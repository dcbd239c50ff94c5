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


def rate_text(done: int, elapsed: float, unit: str, total: int | None = None) -> str:
    """"12.3 blocks/s", or "one per 28.6 s" for slow units such as training steps, and the time
    left when the total is known."""
    if done == 0:
        return f"{elapsed:.0f} s, none done yet"
    rate = done / elapsed
    text = f"{rate:.1f} {unit}/s" if rate >= 1 else f"one per {1 / rate:.1f} s"
    if total and done < total:
        left = (total - done) / rate
        text += f", about {left / 60:.0f} min left" if left >= 120 else f", about {left:.0f} s left"
    return text


class LogProgress:
    """Logs count and rate at most every `every` seconds (a Prefect run log stays readable)."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 every: float = 10.0) -> None:
        self.logger = logger
        self.every = every
        self.description = ""
        self.unit = ""
        self.total: int | None = None
        self.done = 0
        self.t0 = self.last = time.monotonic()

    def start(self, description: str, total: int | None, unit: str) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.done = 0
        self.t0 = self.last = time.monotonic()

    def _log(self) -> None:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        of = f"/{self.total}" if self.total else ""
        self.logger.info("%s: %d%s %s (%s)", self.description, self.done, of, self.unit,
                         rate_text(self.done, elapsed, self.unit, self.total))

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._log()

    def finish(self) -> None:
        self._log()
