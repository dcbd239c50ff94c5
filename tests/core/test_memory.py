"""A stage's peak resident memory, as its report and the demo's record state it."""

import numpy as np
import pytest

from realm_core.graph.resolver import measured_run
from realm_core.memory import PeakMemory, resident_mb
from realm_core.store.artifacts import ArtifactRef, StageResult


def test_the_peak_inside_a_block_is_seen_after_the_memory_is_freed() -> None:
    before = resident_mb()
    assert before is not None and before > 0
    with PeakMemory(every=0.01) as peak:
        block = np.ones(300 * 2**20 // 8)  # 300 MB, touched
        del block
    assert peak.mb is not None and peak.mb >= before + 250
    assert resident_mb() < peak.mb - 200  # gone again: only the sampled peak remembers it


def test_a_stage_run_carries_its_seconds_and_peak_memory() -> None:
    ref = ArtifactRef("blocks", "/store/blocks/abc", "abc")

    def stage() -> StageResult:
        np.ones(64 * 2**20 // 8).sum()
        return StageResult(ref, cached=False, stats={"blocks": 3})

    run = measured_run("chunk", {"max_wordpieces": 288}, stage)
    assert run.ref == ref and run.stats == {"blocks": 3} and run.seconds > 0
    assert run.peak_rss_mb is not None and run.summary()["peak_rss_mb"] == run.peak_rss_mb
    off = measured_run("pretrain", {}, lambda: None)
    assert off.ref is None and off.stats == {"skipped": "off in this config"}


def test_memory_a_stage_freed_is_handed_back_to_the_system() -> None:
    """Many small allocations freed stay resident in glibc's heap until trimmed: after
    `release_free_memory` they are gone (where there is glibc)."""
    import gc

    from realm_core.memory import release_free_memory

    release_free_memory()
    before = resident_mb()
    chunks = [bytes(1000) + bytes([i % 256]) for i in range(300_000)]  # 300 MB in 1 kB pieces
    kept = chunks[::1000]
    del chunks
    gc.collect()
    after = release_free_memory()
    if after is None:
        pytest.skip("no glibc malloc_trim here")
    assert before is not None and after < before + 100 and len(kept) == 300


def test_a_running_stage_hands_its_freed_heap_back_on_a_timer() -> None:
    """Inside `TrimmedHeap` (every stage's `measured_run`) memory freed mid-stage goes back to the
    system within a few periods, without the stage calling anything; outside it stays."""
    import gc
    import time

    from realm_core.memory import TrimmedHeap, release_free_memory

    def churn() -> list[bytes]:
        chunks = [bytes(1000) + bytes([i % 256]) for i in range(300_000)]  # 300 MB in 1 kB pieces
        kept = chunks[::1000]
        del chunks
        gc.collect()
        return kept

    if release_free_memory() is None:
        pytest.skip("no glibc malloc_trim here")
    before = resident_mb()
    assert before is not None
    kept = churn()
    held = resident_mb()
    assert held is not None and held > before + 200  # glibc keeps the freed pieces
    release_free_memory()
    with TrimmedHeap(every=0.05) as heap:
        kept += churn()
        time.sleep(0.5)
        during = resident_mb()
    assert heap.trims >= 1 and during is not None and during < before + 100 and len(kept) == 600
