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
        self.logger.info("%s: %d%s %s (%.1f %s/s)", self.description, self.done, of, self.unit,
                         self.done / elapsed, self.unit)

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._log()

    def finish(self) -> None:
        self._log()
