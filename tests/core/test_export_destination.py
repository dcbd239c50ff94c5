"""Where `realm export` may write, checked before anything is written: never over or inside the
store it exports from, never a file or a folder an export did not write, never under /proc."""

import json
from pathlib import Path

import pytest

from realm_core.errors import ConfigError
from realm_core.system_bundle import FORMAT, MANIFEST, export_destination


def test_an_export_never_goes_over_inside_or_above_its_store(tmp_path: Path) -> None:
    store = tmp_path / "work" / "artifacts"
    store.mkdir(parents=True)
    for dest in (store, store / "ict", tmp_path / "work"):
        with pytest.raises(ConfigError, match="the artifact store"):
            export_destination(dest, store, replace=True)
    assert export_destination(tmp_path / "exported", store, replace=False) == (tmp_path / "exported").resolve()


def test_force_replaces_only_a_previous_export(tmp_path: Path) -> None:
    other = tmp_path / "notes"
    other.mkdir()
    (other / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match="exists already"):
        export_destination(other, None, replace=False)
    with pytest.raises(ConfigError, match="expected a previous export"):
        export_destination(other, None, replace=True)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="found a file"):
        export_destination(a_file, None, replace=True)
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / MANIFEST).write_text(json.dumps({"format": FORMAT}))
    assert export_destination(previous, None, replace=True) == previous.resolve()


def test_a_missing_parent_proc_and_a_file_as_parent_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an existing folder"):
        export_destination(tmp_path / "no" / "such" / "dir", None, replace=False)
    with pytest.raises(ConfigError, match="/proc"):
        export_destination(Path("/proc/realm-export"), None, replace=False)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ConfigError, match="not an existing folder"):
        export_destination(tmp_path / "plain" / "exported", None, replace=False)
