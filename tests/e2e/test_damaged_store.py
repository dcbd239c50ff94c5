"""The command line over a store whose cached artifacts were damaged after they were published
(tests/corruption.py): the hit is refused with `error:` naming the file and the stage, exit 2,
and `--force` on that stage repairs it, index versions included. In-process, on a copy of the
session's tiny upstream."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import TinyUpstream, one_artifact
from tests.corruption import random_bytes, remove, truncate

pytestmark = pytest.mark.slow
runner = CliRunner()
UNTRAINED = ["--set", "embed.encoder_from=config"]


def realm(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.output


@pytest.fixture
def root(tiny_upstream: TinyUpstream, tmp_path: Path) -> str:
    root = str(tmp_path / "art")
    shutil.copytree(tiny_upstream[0], root)
    return root


def test_a_damaged_block_file_is_refused_and_force_recomputes_it(root: str) -> None:
    tiny = ["--preset", "tiny", "--root", root]
    part = sorted((one_artifact(Path(root), "blocks") / "blocks").glob("part-*.parquet"))[0]
    random_bytes(part)
    code, output = realm("mine-spans", *tiny)
    assert code == 2 and f"error: {part}: sha256" in output, output
    assert "stage 'chunk' is damaged: recompute it with --force" in output and "Traceback" not in output
    code, output = realm("chunk", "--force", *tiny)
    assert code == 0, output
    code, output = realm("mine-spans", *tiny)
    assert code == 0 and "(cached)" in output, output  # the same blocks again: its spans a hit


def test_a_damaged_index_is_refused_by_search_and_force_rebuilds_the_version(root: str) -> None:
    tiny = ["--preset", "tiny", "--root", root, *UNTRAINED]
    code, output = realm("refresh-index", *tiny)
    assert code == 0, output
    truncate(Path(root) / "index" / "v00000000" / "index.faiss")
    code, output = realm("search", "Warsaw", "-k", "2", *tiny)
    assert code == 2 and "index.faiss: " in output and "bytes where the manifest records" in output, output
    code, output = realm("refresh-index", "--force", *tiny)  # replaces version 0 in place
    assert code == 0, output
    code, output = realm("search", "Warsaw", "-k", "2", "--json", *tiny)
    assert code == 0 and '"rank": 2' in output, output


def test_a_missing_model_file_is_refused_by_the_stage_that_serves_it(root: str) -> None:
    tiny = ["--preset", "tiny", "--root", root]
    remove(one_artifact(Path(root), "retriever") / "doc_encoder" / "model.safetensors")
    code, output = realm("refresh-index", *tiny)  # embeds with ICT's document encoder
    assert code == 2 and "model.safetensors: missing: the manifest lists it" in output, output
    assert "stage 'ict' is damaged" in output
