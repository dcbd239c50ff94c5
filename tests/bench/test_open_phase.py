"""experiments/open_phase.py: the one list of open-phase runs and pairings, checked before any
run, and consistent with the table that renders their results."""

from __future__ import annotations

from pathlib import Path

import lab_tables as readme_tables
import open_phase
import pytest
import yaml


def test_a_pairing_of_an_unlisted_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "open_phase.yaml"
    bad.write_text(yaml.safe_dump({"base": [], "runs": {"ict": []}, "pairings": {"x": ["ict", "ict_open"]}}))
    with pytest.raises(SystemExit) as stop:
        open_phase.load(bad)
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"error: {bad}: pairing x names run 'ict_open', not among runs\n"


def test_a_run_is_the_base_command_with_its_overrides_then_the_callers(tmp_path: Path) -> None:
    spec = {"base": ["--preset=demo", "--system=ict"], "runs": {"ict_open": ["finetune.steps=300"]}, "pairings": {}}
    cmd = open_phase.command(spec, "ict_open", tmp_path, ["precision=fp32"])
    assert Path(cmd[0]).name == "realm" and cmd[1] == "evaluate"
    assert cmd[2:] == ["--preset=demo", "--system=ict", "--set=finetune.steps=300", "--set=precision=fp32",
                       f"--json={tmp_path / 'ict_open.json'}"]


def test_every_pairing_the_table_renders_is_one_the_runner_makes() -> None:
    spec = open_phase.load(open_phase.CONFIG)
    rendered = ({"openqa_ict_open_test"} | {name for v in readme_tables.OPEN_PHASE_VARIANTS for name in v[:2]}
                | {pair[0] for pair in readme_tables.OPEN_PHASE_PAIRS})
    assert rendered == set(spec["pairings"]), rendered ^ set(spec["pairings"])


def test_every_study_the_reader_page_lists_has_its_result_file() -> None:
    missing = [name for name, *_ in readme_tables.READER_STUDIES
               if not (readme_tables.RESULTS / f"{name}.json").is_file()]
    assert not missing
