"""experiments/paired_runs.py and the open-phase table README renders from its output: the paired
difference on a known table, each run's warm-start config carried over from the run's own file,
and the table's row label built from it."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import lab
import lab_tables as readme_tables
import paired_runs
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SYSTEM = "ICT (ORQA-like)"


def _run(root: Path, name: str, block_length: int, correct: list[bool], phase_steps: int) -> Path:
    """A `realm evaluate --json` file and the evaluation artifact it names: its predictions say
    which qids it got, the file keeps the ICT warm start's stats and config as the command writes them."""
    artifact = root / "openqa_eval" / name
    artifact.mkdir(parents=True)
    pq.write_table(pa.table({"dataset": ["squad-open"] * len(correct), "system": [SYSTEM] * len(correct),
                             "qid": [f"q{i}" for i in range(len(correct))], "correct": correct}),
                   artifact / "openqa_predictions")
    em = sum(correct) / len(correct)
    budget = {SYSTEM: {"open": {"examples_seen": 80, "epochs": 0.5, "wall_seconds": 12.0,
                                "dev_curve": [[10, 0.25], [20, 0.3]]}}} if phase_steps else {}
    run = {"artifact": str(artifact), "budget": budget,
           "results": {"squad-open": {"systems": {SYSTEM: {"EM": em, "F1": em, "R@5": 0.5}}}},
           "finetune": {"steps": phase_steps, "batch_size": 8, "learning_rate": 5e-5, "train_query_encoder": False,
                        "dev_questions": 40},
           "warm_starts": {"ict": {"steps": 60, "batch_size": 256, "train_seconds": 100.0}},
           "warm_start_configs": {"ict": {"block_length": block_length, "micro_batch": 64}}}
    path = root / f"{name}.json"
    path.write_text(json.dumps(run))
    return path


def test_paired_runs_keeps_the_warm_start_config_and_pairs_on_a_known_table(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(lab, "RESULTS", results)
    monkeypatch.setattr(readme_tables, "RESULTS", results)
    # 10 questions: the phase answers q0-q5, the baseline q0-q2; 3 discordant pairs, all one way
    a = _run(tmp_path, "open", 288, [True] * 6 + [False] * 4, phase_steps=20)
    b = _run(tmp_path, "base", 64, [True] * 3 + [False] * 7, phase_steps=0)
    monkeypatch.setattr(sys, "argv", ["paired_runs.py", str(a), str(b), "--name", "t"])
    paired_runs.main()
    result = json.loads((results / "t.json").read_text())
    p = result["paired"][SYSTEM]
    assert p["questions"] == 10
    assert p["delta"] == pytest.approx(0.3)
    assert p["mcnemar_p"] == pytest.approx(0.25)  # 2 * 0.5 ** 3
    assert p["ci95"][0] <= 0.3 <= p["ci95"][1]
    assert result["runs"]["a"]["warm_start_configs"] == {"ict": {"block_length": 288, "micro_batch": 64}}
    assert result["runs"]["b"]["warm_start_configs"] == {"ict": {"block_length": 64, "micro_batch": 64}}
    assert result["outcomes"]["a"] == {"qids": [f"q{i}" for i in range(10)], "correct": {SYSTEM: "1111110000"}}
    assert result["outcomes"]["b"]["correct"] == {SYSTEM: "1110000000"}

    rows = readme_tables.open_phase_table(result).splitlines()
    assert rows[0].startswith("| ICT: steps x contexts, training | open-domain phase | dev EM by step (40 dev questions)")
    assert rows[2] == "| 60 x 256 of 64 wordpieces, 100 s | none | - | 50.0 | 30.0 / 30.0 | - |"
    assert rows[3].startswith("| 60 x 256 of 288 wordpieces, 100 s | 20 steps x 8 at lr 5e-5, query encoder frozen: 80 examples, "
                              "0.5 epochs, 12 s | 10: 25.0, 20: 30.0 | 50.0 | 60.0 / 60.0 | **+30.0 [")
    assert rows[3].endswith("**, p 0.25 |")


def test_a_run_from_before_warm_start_configs_has_rows_without_a_block_length(tmp_path, monkeypatch):
    """An older `realm evaluate --json` (no warm_start_configs): the pairing still works and the
    row says nothing it does not know."""
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(lab, "RESULTS", results)
    monkeypatch.setattr(readme_tables, "RESULTS", results)
    a = _run(tmp_path, "open", 288, [True, False], phase_steps=20)
    b = _run(tmp_path, "base", 64, [True, False], phase_steps=0)
    for path in (a, b):
        run = json.loads(path.read_text())
        del run["warm_start_configs"]
        path.write_text(json.dumps(run))
    monkeypatch.setattr(sys, "argv", ["paired_runs.py", str(a), str(b), "--name", "t"])
    paired_runs.main()
    result = json.loads((results / "t.json").read_text())
    assert result["paired"][SYSTEM]["delta"] == 0.0 and result["runs"]["a"]["warm_start_configs"] is None
    assert readme_tables.open_phase_table(result).splitlines()[2].startswith("| 60 x 256, 100 s | none |")


def test_a_pairing_note_names_how_the_two_phases_differ() -> None:
    def pair(a: dict, b: dict) -> dict:
        return {"runs": {"a": {"finetune": a}, "b": {"finetune": b}}}

    assert readme_tables._phases(pair({"steps": 600, "learning_rate": 5e-5}, {"steps": 300, "learning_rate": 5e-5})) \
        == "with open-domain phases of 600 and 300 steps"
    assert readme_tables._phases(pair({"steps": 600, "learning_rate": 1e-4}, {"steps": 600, "learning_rate": 5e-5})) \
        == "with open-domain phases at lr 1e-4 and 5e-5"
    assert readme_tables._phases(pair({"steps": 300}, {"steps": 300})) == "both with the open-domain phase"


def test_a_side_of_an_earlier_result_pairs_as_its_run_did(tmp_path, monkeypatch, capsys):
    """The outcomes a result keeps stand in for a run whose artifacts are gone: pairing a new run
    with `t.json:a` gives what pairing it with that run's own file gave, its figures included; a
    `realm evaluate --json` file that keeps outcomes needs no artifact; a result from before
    outcomes were kept, or a run file whose artifact is gone and keeps none, is refused by name."""
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(lab, "RESULTS", results)
    a = _run(tmp_path, "open", 288, [True] * 6 + [False] * 4, phase_steps=20)
    b = _run(tmp_path, "base", 64, [True] * 3 + [False] * 7, phase_steps=0)
    c = _run(tmp_path, "longer", 288, [False] + [True] * 8 + [False], phase_steps=40)

    def pair(x: object, y: object, name: str) -> dict:
        monkeypatch.setattr(sys, "argv", ["paired_runs.py", str(x), str(y), "--name", name])
        paired_runs.main()
        return json.loads((results / f"{name}.json").read_text())

    pair(a, b, "t")
    direct = pair(c, a, "direct")
    kept = pair(c, f"{results / 't.json'}:a", "kept")
    assert kept["paired"] == direct["paired"]
    assert kept["paired"][SYSTEM]["delta"] == pytest.approx(0.2)  # c gains q6-q8, loses q0
    assert kept["runs"]["b"] == direct["runs"]["b"] and kept["runs"]["b"]["json"] == str(a)
    assert kept["outcomes"]["b"]["correct"] == {SYSTEM: "1111110000"}
    assert pair(f"{results / 't.json'}:b", c, "reversed")["paired"][SYSTEM]["delta"] == pytest.approx(-0.5)

    # a run file that keeps its outcomes (as `realm evaluate --json` now writes) needs no artifact
    run = json.loads(c.read_text())
    run["outcomes"] = {"squad-open": json.loads((results / "direct.json").read_text())["outcomes"]["a"]}
    c.write_text(json.dumps(run))
    shutil.rmtree(tmp_path / "openqa_eval" / "longer")
    assert pair(c, a, "no_artifact")["paired"] == direct["paired"]

    old = json.loads((results / "t.json").read_text())
    del old["outcomes"]
    (results / "old.json").write_text(json.dumps(old))
    with pytest.raises(SystemExit) as stop:
        pair(c, f"{results / 'old.json'}:a", "x")
    assert stop.value.code == 2
    assert re.match(r"error: .*old.json: written before paired results kept each question's outcome",
                    capsys.readouterr().err)
    shutil.rmtree(tmp_path / "openqa_eval" / "base")
    with pytest.raises(SystemExit) as stop:
        pair(a, b, "x")
    assert stop.value.code == 2
    assert re.match(r"error: .*base.json: its evaluation artifact .*base is gone and the file keeps no outcomes",
                    capsys.readouterr().err)
