"""`make demo`: the full pipeline on the bundled corpus with an embedded Prefect. Its summary
also writes `<work>/reports/demo.json` (the demo's wall time, each stage's seconds, what its systems
answer, the machine); `make demo-record` copies it to bench/results/demo.json, which the
demo-timings page renders."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from realm_core.config import data_dir
from realm_core.errors import RealmError


def open_qa_summary(manifest: dict[str, Any]) -> str:
    """What the demo's QA systems answer: EM and F1 on each dataset's test questions."""
    lines = ["\nopen-domain QA (test questions; EM / F1 / answer in the top 5 blocks):"]
    for dataset, res in manifest["results"].items():
        lines.append(f"  {dataset} ({res['questions']:,} questions)")
        for name, m in res["systems"].items():
            recall = next((v for k, v in m.items() if k.startswith("R@") and not k.endswith("read")), 0.0)
            lines.append(f"    {name:<24} EM {100 * m['EM']:5.1f}  F1 {100 * m['F1']:5.1f}  R {100 * recall:5.1f}")
    return "\n".join(lines)


# CPU features that decide the encoders' speed: AVX2 fp32, native bf16 (AVX512-BF16, AMX)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# the run's record, under the work dir: a user's clone stays clean (`make demo-record` copies it
# to bench/results/demo.json, which the demo-timings page renders)
def record_path() -> Path:
    from realm_core.config import work_dir

    return work_dir() / "reports" / "demo.json"


def cpu_description(wanted: Sequence[str] = CPU_FLAGS) -> dict[str, Any]:
    """The CPU's model name and the flags of `wanted` it has (Linux: /proc/cpuinfo; elsewhere
    the platform's processor string and no flags)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "flags": [f for f in wanted if f in flags], "cores": os.cpu_count()}


def machine_busy_seconds() -> float | None:
    """CPU seconds every process on the machine has run since boot, all cores together (Linux:
    /proc/stat's busy fields; elsewhere None)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...: idle and iowait are not busy
    busy = sum(int(v) for i, v in enumerate(fields[1:9]) if i not in (3, 4))
    return busy / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int | None = None) -> float | None:
    """CPU seconds of process `root` (default: this one) and every live descendant, each with
    its waited-for children (Linux: /proc/<pid>/stat; elsewhere None): the demo's own work,
    its embedded Prefect server and worker processes included."""
    root = os.getpid() if root is None else root
    stats: dict[int, tuple[int, float]] = {}
    try:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    raw = (entry / "stat").read_text()
                except OSError:
                    continue  # ended meanwhile
                rest = raw[raw.rindex(")") + 2:].split()  # the fields after "pid (comm) "
                # ppid, then utime stime cutime cstime (fields 4, 14-17 of proc(5))
                stats[int(entry.name)] = (int(rest[1]), sum(int(v) for v in rest[11:15]) / os.sysconf("SC_CLK_TCK"))
    except OSError:
        return None
    if root not in stats:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


def other_cpu_share(busy: tuple[float | None, float | None], own: tuple[float | None, float | None],
                    wall_seconds: float, cores: int) -> float | None:
    """The share of the machine's CPU time over the run that processes outside the demo used:
    (busy seconds of the whole machine - the demo's own) / (wall x cores), from readings at its
    start and end. 0 on quiet cores; None where the readings are not available."""
    if None in (*busy, *own) or wall_seconds <= 0:
        return None
    other = (busy[1] - busy[0]) - (own[1] - own[0])  # type: ignore[operator]
    return round(max(other, 0.0) / (wall_seconds * max(cores, 1)), 3)


def demo_record(result: dict[str, Any], store: Any, wall_seconds: float) -> dict[str, Any]:
    """What `bench/results/demo.json` holds of a finished demo: its wall time, each stage's seconds
    (0 for a cache hit's lookup), the encoders' precision, the machine, the corpus, SQuAD-open test
    EM of each system and how many reader rows the evaluation read and reused, each stage's peak
    resident memory and the process's (this process ran every stage). The caller adds
    `other_cpu_share` (what else ran on the machine meanwhile)."""
    import resource

    import torch

    from realm_core.distributed import resolve_device, resolve_precision

    stages = result["stages"]
    rows = {name: store.open(stages[name]["artifact"]).manifest["rows"] for name in ("ingest", "chunk", "spans")
            if stages.get(name, {}).get("artifact")}
    qa = stages.get("openqa_eval") or {}
    qa_manifest = store.open(qa["artifact"]).manifest if qa.get("artifact") else {}
    squad = qa_manifest.get("results", {}).get("squad-open", {}).get("systems", {})
    stats = qa_manifest.get("stats", {})
    size = sum(f.stat().st_size for f in Path(result["root"]).rglob("*") if f.is_file())
    return {"wall_seconds": round(wall_seconds, 1),
            "all_computed": not any(s["cached"] for s in stages.values() if s["artifact"]),
            "precision": resolve_precision(resolve_device("auto"), "auto"),
            "cpu": cpu_description(), "threads": torch.get_num_threads(),
            "stages": {name: round(s["seconds"], 1) for name, s in stages.items()},
            "stages_peak_rss_mb": {name: s.get("peak_rss_mb") for name, s in stages.items()},
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "squad_open_em": {name: round(m["EM"], 4) for name, m in squad.items()},
            "reads": ({"pairs_read": stats["reader rows read"], "pairs_reused": stats["reader rows reused"]}
                      if "reader rows read" in stats else None),
            "corpus": {"documents": rows.get("ingest", {}).get("documents"),
                       "blocks": rows.get("chunk", {}).get("blocks"),
                       "sentences": rows.get("spans", {}).get("sentences"),
                       "salient_spans": rows.get("spans", {}).get("salient_spans")},
            "store_bytes": size, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def main() -> int:
    from flows import exit_on_sigterm

    started = time.perf_counter()
    busy_start, own_start = machine_busy_seconds(), tree_cpu_seconds()

    exit_on_sigterm()  # `kill` stops the embedded Prefect server too
    if not data_dir().is_dir():
        print(f"error: the bundled data is not at {data_dir()}; set REALM_DATA_DIR, or fetch it "
              "with `realm data fetch` (see data/README.md)", file=sys.stderr)
        return 2
    from flows import prefect_home

    try:
        prefect_home()
        from flows.pipeline import full_pipeline

        result = full_pipeline(preset="demo")
    except RealmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from realm_core.store.artifacts import ArtifactStore

    store = ArtifactStore(result["root"])
    print("\nrealm demo finished.")
    data_stages = {"ingest", "chunk", "spans"}
    for name, stage in result["stages"].items():
        if stage["artifact"] is None:
            print(f"  {name:<14} off in this config")
            continue
        manifest = store.open(stage["artifact"]).manifest
        if name in data_stages:
            summary = ", ".join(f"{n:,} {table}" for table, n in manifest["rows"].items())
        else:
            summary = ", ".join(f"{k} {v}" for k, v in list(stage["stats"].items())[:6]
                                if isinstance(v, (int, float, str)))
        print(f"  {name:<14} {'cache hit' if stage['cached'] else 'computed':<9} "
              f"{stage['seconds']:>7.1f}s  {summary}")
        print(f"                 {stage['artifact']}")
    evaluation = result["stages"].get("retrieval_eval")
    if evaluation is not None:
        print("\nretrieval (SQuAD-open: articles 30-39 against every block):")
        print(store.open(evaluation["artifact"]).manifest["report"])
    qa = result["stages"].get("openqa_eval")
    if qa is not None:
        print(open_qa_summary(store.open(qa["artifact"]).manifest))
        pretrained = result["stages"].get("pretrain", {}).get("stats", {})
        if pretrained.get("steps"):
            print(f"  REALM's rows: {pretrained['steps']} pretraining steps, a check that the pipeline runs end to "
                  "end, not REALM's measured gain (`make laptop`: docs/experiments/realm-gain.md)")
    wall = time.perf_counter() - started
    record = demo_record(result, store, wall)
    # a timing is a run on quiet cores: the record says how much else ran beside it
    record["other_cpu_share"] = other_cpu_share((busy_start, machine_busy_seconds()),
                                                (own_start, tree_cpu_seconds()), wall, os.cpu_count() or 1)
    target = record_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=2) + "\n")
    if target.is_file():
        print(f"\n  timings:  {target} ({record['wall_seconds'] / 60:.1f} min, "
              f"{'every stage computed' if record['all_computed'] else 'some stages were cache hits'})")
    print(f"  results:  {result['root']}")
    print(f"  report:   {result['report']}")
    print("  inspect one with: .venv/bin/realm inspect <artifact dir>")
    return 0


if __name__ == "__main__":
    from flows import end_process

    end_process(main())
