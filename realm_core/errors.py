"""One error hierarchy. Every bad input names the file, the position and what was expected."""

from __future__ import annotations

from typing import Any


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


class CorruptArtifactError(ArtifactError):
    """A published artifact's files disagree with its manifest (missing, another size, another
    content hash): served as it is, it would fail later or answer wrongly. `--force` on the
    stage that wrote it recomputes it."""

    def __init__(self, path: object, what: str, stage: str | None = None) -> None:
        self.path, self.what, self.stage = str(path), what, stage
        how = (f"; the cached artifact of stage {stage!r} is damaged: recompute it with --force on that stage"
               if stage else "")
        super().__init__(f"{self.path}: {what}{how}")


class ConfigError(RealmError):
    """A configuration value or override is invalid."""


class QueryError(RealmError):
    """A query is empty or too long, asks for too many blocks, or names an unknown system."""


class MissingIndexError(QueryError):
    """A search of the current index before any index version was built."""


class MissingArtifactError(QueryError):
    """The query side needs an artifact the pipeline has not produced for this config and code
    (it serves what exists and never trains)."""


def unreadable_input(path: object, expected: str, error: OSError) -> InputError:
    """The one place an OS error on a user's input file becomes an InputError: the file, what
    the stage expected there, and the cause in words (no traceback)."""
    if isinstance(error, IsADirectoryError):
        found = "a directory"
    elif isinstance(error, FileNotFoundError):
        found = "no such file"
    elif isinstance(error, PermissionError):
        found = "a file this user may not read (permission denied)"
    else:
        found = f"an unreadable file ({error.strerror or type(error).__name__})"
    return InputError(path, expected, found=found)


def check_input_file(path: object, expected: str) -> None:
    """Raise `unreadable_input`'s error unless `path` is a regular file this process can open."""
    from pathlib import Path

    p = Path(str(path))
    try:
        if p.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(p))
        with p.open("rb"):
            pass
    except OSError as e:
        raise unreadable_input(p, expected, e) from None


def parse_json(text: str | bytes, path: object, expected: str, position: str | None = None) -> Any:
    """`json.loads` of a user's input, every way it can fail an InputError naming the file and
    the position (`position`: a JSONL line; else the parser's line and column): bad syntax, bad
    UTF-8, nesting deeper than the parser's recursion limit."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = position or f"line {e.lineno}, column {e.colno}"
        raise InputError(path, expected, position=where, found=e.msg) from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"UTF-8 {expected}", position=position or f"byte {e.start}", found="bad bytes") from None
    except RecursionError:
        raise InputError(path, expected, position=position, found="JSON nested too deeply to read") from None
