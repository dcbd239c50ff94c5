"""One error hierarchy. Every bad input names the file, the position and what was expected."""

from __future__ import annotations


class RealmError(Exception):
    """Base of every error this project raises on purpose; the CLI exits non-zero on it."""


class InputError(RealmError):
    """A user's input file is not what the stage expects."""

    def __init__(self, path: object, expected: str, *, position: str | None = None,
                 found: str | None = None) -> None:
        self.path = str(path)
        self.position = position
        self.expected = expected
        self.found = found
        where = f"{self.path}" + (f" at {position}" if position else "")
        msg = f"{where}: expected {expected}"
        if found:
            msg += f", found {found}"
        super().__init__(msg)


class ArtifactError(RealmError):
    """An artifact is missing, half-written, of another schema, or disagrees with its inputs."""


class ConfigError(RealmError):
    """A configuration value or override is invalid."""
