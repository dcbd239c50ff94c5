"""The rich progress bar the command line shows for realm_core's Progress protocol."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from realm_core.progress import Rate

console = Console(stderr=True)


class RichProgress:
    """realm_core.progress.Progress shown as a rich bar with a rate column, one bar per step."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._rate = Rate("", None)

    def start(self, description: str, total: int | None, unit: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._rate = Rate(unit, total)
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                             console=console)
        self._bar.start()
        self._task = self._bar.add_task(description, total=total, rate="")

    def advance(self, n: int = 1) -> None:
        self._rate.advance(n)
        self._bar.update(self._task, advance=n, rate=self._rate.text())

    def pause(self, what: str) -> None:
        self._rate.pause()
        self._bar.update(self._task, rate=what + " ...")

    def resume(self) -> None:
        self._rate.resume()
        self._bar.update(self._task, rate=self._rate.text())

    def finish(self) -> None:
        task = self._bar.tasks[0]
        if task.total is None:
            self._bar.update(self._task, total=task.completed)
        self._bar.stop()
