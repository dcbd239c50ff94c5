"""Style promises checked in CI: mypy --strict on realm_core, ruff everywhere, no Prefect in
realm_core, no pickle on user files, no module over ~400 lines."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_mypy_strict_on_realm_core() -> None:
    r = subprocess.run([str(BIN / "mypy"), "realm_core"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff() -> None:
    r = subprocess.run([str(BIN / "ruff"), "check", "realm_core", "tasks", "flows", "tests", "bench"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_house_rules() -> None:
    for path in (ROOT / "realm_core").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import prefect|from prefect)", text, re.M), path
    for package in ("realm_core", "tasks", "flows"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"^\s*import pickle|pickle\.load", text, re.M), path
            assert len(text.splitlines()) <= 400, path
