"""`make demo` ends by saying what its QA systems answer (EM and F1 on the test questions), and
writes its own record (<work>/reports/demo.json; `make demo-record` copies it to bench/results)."""

import json
import os
import sys

import bench_tables as readme_tables
import pytest

from flows.demo import demo_record, open_qa_summary
from realm_core.store.artifacts import ArtifactStore
from tests.conftest import TinyUpstream, one_artifact


def test_demo_summary_reports_em_f1_and_recall_per_system() -> None:
    manifest = {"results": {"squad-open": {"questions": 1034, "systems": {
        "gold paragraph reader": {"EM": 0.5, "F1": 0.6, "R@5": 1.0, "R@5 read": 1.0},
        "BM25 + reader": {"EM": 0.301, "F1": 0.4, "R@5": 0.9, "R@5 read": 0.89}}}}}
    assert open_qa_summary(manifest).splitlines() == [
        "",
        "open-domain QA (test questions; EM / F1 / answer in the top 5 blocks):",
        "  squad-open (1,034 questions)",
        "    gold paragraph reader    EM  50.0  F1  60.0  R 100.0",
        "    BM25 + reader            EM  30.1  F1  40.0  R  90.0"]


@pytest.mark.slow
def test_the_demo_record_counts_the_corpus_and_times_each_stage(tiny_upstream: TinyUpstream) -> None:
    """What `make demo` writes to <work>/reports/demo.json, from a store's real manifests."""
    root, _, refs = tiny_upstream
    stages = {"ingest": {"artifact": str(one_artifact(root, "documents")), "cached": False, "seconds": 1.25},
              "chunk": {"artifact": refs["blocks"].path, "cached": False, "seconds": 2.0},
              "spans": {"artifact": refs["spans"].path, "cached": True, "seconds": 0.01},
              "openqa_eval": {"artifact": None, "cached": True, "seconds": 0.0}}
    store = ArtifactStore(root)
    record = demo_record({"root": str(root), "stages": stages}, store, 123.456)
    rows = {kind: store.open(ref.path).manifest["rows"] for kind, ref in refs.items() if kind != "ict"}
    assert record["corpus"] == {"documents": store.open(stages["ingest"]["artifact"]).manifest["rows"]["documents"],
                                "blocks": rows["blocks"]["blocks"], "sentences": rows["spans"]["sentences"],
                                "salient_spans": rows["spans"]["salient_spans"]}
    assert record["wall_seconds"] == 123.5 and record["stages"] == {"ingest": 1.2, "chunk": 2.0, "spans": 0.0,
                                                                   "openqa_eval": 0.0}
    assert record["all_computed"] is False  # spans was a cache hit: not a timing
    assert record["squad_open_em"] == {} and record["reads"] is None  # no evaluation in this store
    assert record["precision"] in ("fp32", "bf16") and record["cpu"]["cores"] >= 1
    assert record["store_bytes"] == sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    json.dumps(record)  # a JSON file


def test_the_demo_timings_table_is_rendered_from_the_record() -> None:
    record = {"wall_seconds": 3700.0, "all_computed": True, "precision": "bf16",
              "cpu": {"model": "Xeon", "flags": ["avx2", "avx512_bf16"], "cores": 2}, "threads": 2,
              "stages": {"ingest": 4.0, "ict": 540.0}, "squad_open_em": {"BM25 + reader": 0.3535},
              "reads": {"pairs_read": 1000, "pairs_reused": 250}, "date": "2026-12-02"}
    assert readme_tables.demo_table(record).splitlines() == [
        "| stage | seconds |", "|---|---:|", "| ingest | 4 s |", "| warm start (ICT) | 9.0 min |",
        "| **the whole run, to its summary** | **61.7 min** |", "",
        "every stage computed; Xeon (2 cores; avx2, avx512_bf16), 2 threads, bf16; 2026-12-02.", "",
        "SQuAD-open test EM (%): BM25 + reader 35.4. The evaluation read 1,000 reader rows and reused 250 "
        "that another system had read."]


def test_a_demo_beside_other_work_says_its_time_is_not_quiet() -> None:
    """The record measures what else ran (`other_cpu_share`); the page and README say so above 5%."""
    import subprocess
    import time

    from flows.demo import machine_busy_seconds, other_cpu_share, tree_cpu_seconds

    busy, own, t0 = machine_busy_seconds(), tree_cpu_seconds(), time.perf_counter()
    # a child of this process burns CPU: the demo's own tree, not other work
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3 * 10**6))"], check=True)
    assert tree_cpu_seconds() > own + 0.05  # type: ignore[operator]
    share = other_cpu_share((busy, machine_busy_seconds()), (own, tree_cpu_seconds()), time.perf_counter() - t0,
                            os.cpu_count() or 1)
    assert share is not None and 0 <= share <= 1
    assert other_cpu_share((100.0, 160.0), (10.0, 40.0), 60.0, 2) == 0.25  # 30 of 120 CPU seconds
    assert other_cpu_share((None, 1.0), (0.0, 1.0), 60.0, 2) is None
    record = {"wall_seconds": 3700.0, "all_computed": True, "precision": "bf16",
              "cpu": {"model": "Xeon", "flags": ["avx2"], "cores": 2}, "threads": 2, "stages": {"ingest": 4.0},
              "squad_open_em": {}, "reads": None, "date": "2026-12-02", "store_bytes": 2**30,
              "corpus": {"documents": 10, "blocks": 20}}
    quiet, busy_run = dict(record, other_cpu_share=0.01), dict(record, other_cpu_share=0.3)
    assert "not a quiet timing" not in readme_tables.demo_table(quiet)
    assert "other processes used 30% of the CPU meanwhile: not a quiet timing" in readme_tables.demo_table(busy_run)
    assert "(an upper bound)" in readme_tables.demo_summary(busy_run)
    assert "upper bound" not in readme_tables.demo_summary(quiet)
