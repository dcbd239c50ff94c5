"""Bad input on the command line ends in `error: <file>: ...`, exit 2, no traceback and no
artifact; error text is printed verbatim (never read as Rich markup). In-process, fast."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from realm_core.errors import unreadable_input

runner = CliRunner()


def realm(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.output


def _unreadable(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` unreadable: chmod 000, or where root ignores that, a PermissionError on open."""
    path.chmod(0)
    if os.geteuid() != 0:
        return
    real_open = Path.open

    def denied(self: Path, *args: object, **kwargs: object) -> object:
        if self.resolve() == path.resolve():
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", denied)
    import builtins

    real_builtin_open = builtins.open

    def denied_builtin(file: object, *args: object, **kwargs: object) -> object:
        if isinstance(file, (str, Path)) and Path(file).resolve() == path.resolve():
            raise PermissionError(13, "Permission denied", str(file))
        return real_builtin_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", denied_builtin)


def test_os_errors_become_input_errors() -> None:
    assert "permission denied" in str(unreadable_input("f.json", "JSON", PermissionError(13, "x")))
    assert str(unreadable_input("d", "a file", IsADirectoryError(21, "x"))) == "d: expected a file, found a directory"
    assert "no such file" in str(unreadable_input("m", "a file", FileNotFoundError(2, "x")))


def test_unreadable_source_is_an_error_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "corpus.jsonl"
    src.write_text(json.dumps({"id": 1, "title": "T", "text": "x"}) + "\n")
    _unreadable(src, monkeypatch)
    code, out = realm("ingest", "--preset", "tiny", "--source", f"jsonl:{src}", "--root", str(tmp_path / "art"))
    assert code == 2, out
    assert f"error: {src}" in out and "permission denied" in out
    assert not (tmp_path / "art" / "documents").exists()


def test_directory_as_source_says_so(tmp_path: Path) -> None:
    code, out = realm("ingest", "--preset", "tiny", "--source", f"jsonl:{tmp_path}", "--root", str(tmp_path / "art"))
    assert code == 2 and "found a directory" in out, out


@pytest.mark.parametrize("where", ["missing", "directory", "unreadable"])
def test_questions_source_missing_directory_or_unreadable(where: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "nq.jsonl"
    if where == "directory":
        path.mkdir()
    elif where == "unreadable":
        path.write_text('{"question": "q", "answer": ["a"]}\n')
        _unreadable(path, monkeypatch)
    sources = json.dumps([{"kind": "nq_open", "path": str(path), "dataset": "nq", "split": "test"}])
    code, out = realm("questions", "--preset", "tiny", "--set", f"questions.sources={sources}",
                      "--root", str(tmp_path / "art"))
    assert code == 2, out
    assert f"error: {path}" in out
    assert {"missing": "no such file", "directory": "a directory", "unreadable": "permission denied"}[where] in out
    assert not (tmp_path / "art" / "questions").exists()


def test_error_text_is_printed_verbatim(tmp_path: Path) -> None:
    """A path holding Rich markup is printed as it is: no other file name, no MarkupError."""
    for name in ("[bold]x.jsonl", "a[/x]b.jsonl"):
        missing = tmp_path / name
        code, out = realm("ingest", "--preset", "tiny", "--source", f"jsonl:{missing}", "--root", str(tmp_path / "art"))
        assert code == 2, out
        assert str(missing) in out, out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    sources = json.dumps([{"kind": "nq_open", "path": str(empty), "dataset": "nq", "split": "test"}])
    code, out = realm("questions", "--preset", "tiny", "--set", f"questions.sources={sources}",
                      "--root", str(tmp_path / "art"))
    assert code == 2 and '{"question": str, "answer": [str, ...]}' in out, out


def test_chunk_takes_ingest_options(tmp_path: Path) -> None:
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"id": i, "title": f"T{i}", "text": f"Sentence {i} is here."}) + "\n"
                           for i in range(3)))
    code, out = realm("chunk", "--preset", "tiny", "--source", f"jsonl:{src}", "--workers", "1",
                      "--root", str(tmp_path / "art"))
    assert code == 0, out
    assert "blocks" in out and len(list((tmp_path / "art" / "blocks").glob("*/manifest.json"))) == 1
    code, out = realm("chunk", "--help")
    assert code == 0 and "--source" in out and "--workers" in out and "--dask" in out
