"""What `realm evaluate --json` writes of a run's retriever warm starts: each one's stats and the
config it trained with, taken from the stage runs the command resolved (no artifact to reopen)."""

from __future__ import annotations

from flows.cli.openqa import peak_memory, warm_start_record
from realm_core.graph.resolver import StageRun
from realm_core.store.artifacts import ArtifactRef


def _run(stage: str, ref: ArtifactRef | None, stats: dict, config: dict, cached: bool = True) -> StageRun:
    return StageRun(stage, ref, cached=cached, stats=stats, seconds=0.0, config=config)


def test_each_warm_start_that_ran_is_recorded_with_its_stats_and_config() -> None:
    ict = {"block_length": 288, "micro_batch": 64, "steps": 60}
    runs = {
        "chunk": _run("chunk", ArtifactRef("blocks", "/a/blocks", "h0"), {"blocks": 9}, {"chunk": {"max_wordpieces": 288}}),
        "ict": _run("ict", ArtifactRef("retriever", "/a/retriever/r", "h1"), {"steps": 60, "train_seconds": 5.0},
                    {"ict": ict}),
        # a warm start the config turned off has no artifact: nothing is said of it
        "retromae": _run("retromae", None, {"skipped": "off in this config"}, {"retromae": {"steps": 40}}),
    }
    assert warm_start_record(runs) == {"warm_starts": {"ict": {"steps": 60, "train_seconds": 5.0}},
                                       "warm_start_configs": {"ict": ict}}


def test_a_run_without_a_dense_retriever_records_no_warm_start() -> None:
    runs = {"chunk": _run("chunk", ArtifactRef("blocks", "/a/blocks", "h0"), {}, {"chunk": {}})}
    assert warm_start_record(runs) == {"warm_starts": {}, "warm_start_configs": {}}


def test_peak_memory_is_said_only_by_a_process_that_did_some_of_the_work() -> None:
    blocks = ArtifactRef("blocks", "/a/blocks", "h0")
    assert peak_memory({"chunk": _run("chunk", blocks, {}, {}), "eval": _run("openqa_eval", blocks, {}, {})}) is None
    peak = peak_memory({"chunk": _run("chunk", blocks, {}, {}), "eval": _run("openqa_eval", blocks, {}, {}, cached=False)})
    assert peak is not None and peak["process"] > 0
