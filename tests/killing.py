"""A progress reporter that stops a training loop as `kill -9` would, for resume tests."""


class Killed(Exception):
    pass


class KillAfter:
    """Dies after `n` steps of the current loop (after that step, before its checkpoint); the
    count restarts at each `start`, so a warm-up before the loop is not counted."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def start(self, description: str, total: int | None, unit: str) -> None:
        self.seen = 0

    def advance(self, n: int = 1) -> None:
        self.seen += n
        if self.seen >= self.n:
            raise Killed

    def pause(self, what: str) -> None:
        pass

    def resume(self) -> None:
        pass

    def finish(self) -> None:
        pass
