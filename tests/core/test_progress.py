"""The whole pipeline's progress line: stages done, elapsed, and the rest at last computed times."""

from __future__ import annotations

import json
from pathlib import Path

from realm_core.progress import PipelineEta


def test_the_time_left_is_the_rest_at_their_last_computed_times(tmp_path: Path) -> None:
    history = tmp_path / "reports" / "stage-seconds-demo.json"
    first = PipelineEta(["ingest", "chunk", "ict"], history)
    assert first.line().endswith("3 stages to go (no time left yet: none has been computed on this store)")
    first.record("ingest", computed=True, seconds=30.0)
    first.record("chunk", computed=True, seconds=90.0)
    first.record("ict", computed=False, seconds=0.2)  # a cache hit: its old time, if any, is kept
    first.record("not planned", computed=True, seconds=5.0)
    assert first.line().startswith("pipeline: 3/3 stages") and first.line().endswith(", done")
    first.save()
    assert json.loads(history.read_text()) == {"ingest": 30.0, "chunk": 90.0}

    second = PipelineEta(["ingest", "chunk", "ict"], history)
    second.record("ingest", computed=False, seconds=0.1)
    line = second.line()
    assert line.startswith("pipeline: 1/3 stages") and "about 90 s left" in line and "1 stage never computed" in line
    assert 0.0 <= second.fraction() < 0.5  # 90 s of known work left, well under a second elapsed


def test_an_unreadable_record_costs_only_the_estimate(tmp_path: Path) -> None:
    history = tmp_path / "stage-seconds-tiny.json"
    history.write_text("{not json")
    eta = PipelineEta(["ingest"], history)
    assert "no time left yet" in eta.line()
    eta.record("ingest", computed=True, seconds=2.0)
    eta.save()
    assert json.loads(history.read_text()) == {"ingest": 2.0}
    assert PipelineEta(["ingest"], None).line().startswith("pipeline: 0/1 stages")  # a remote store keeps none


def test_a_fresh_store_estimates_from_the_times_the_project_measured(tmp_path: Path) -> None:
    shipped = {"ingest": 60.0, "chunk": 120.0, "pretrain": 3600.0}
    fresh = PipelineEta(["ingest", "chunk", "pretrain"], tmp_path / "none.json", shipped)
    assert "about 63 min left at the times the project measured" in fresh.line()
    fresh.record("ingest", computed=True, seconds=10.0)
    fresh.save()
    later = PipelineEta(["ingest", "chunk", "pretrain"], tmp_path / "none.json", shipped)
    later.record("ingest", computed=False, seconds=0.1)
    assert "about 62 min left" in later.line()  # this store's own time replaced the shipped one
    only_own = PipelineEta(["ingest"], tmp_path / "none.json", shipped)
    assert "at their last computed times" in only_own.line()


def test_a_killed_run_keeps_the_times_of_the_stages_it_computed(tmp_path: Path) -> None:
    history = tmp_path / "stage-seconds-laptop.json"
    killed = PipelineEta(["ingest", "ict", "pretrain"], history)
    killed.record("ingest", computed=True, seconds=20.0)
    killed.record("ict", computed=True, seconds=3000.0)
    killed.record("ict", computed=True, seconds=1.0)  # a stage is recorded once: where it was computed
    # killed in pretraining: no save() at the run's end
    resumed = PipelineEta(["ingest", "ict", "pretrain"], history)
    resumed.record("ingest", computed=False, seconds=0.1)
    assert json.loads(history.read_text()) == {"ingest": 20.0, "ict": 3000.0}
    assert "about 50 min left" in resumed.line() and "1 stage never computed" in resumed.line()
