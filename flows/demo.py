"""`make demo`: the full pipeline on the bundled corpus with an embedded Prefect. Its summary
also writes `bench/results/demo.json` (the demo's wall time, each stage's seconds, what its systems
answer, the machine), which the demo-timings page renders."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
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
RESULT = Path(__file__).resolve().parents[1] / "bench" / "results" / "demo.json"


def cpu_description() -> dict[str, Any]:
    """The CPU's model name and the flags of CPU_FLAGS it has (Linux: /proc/cpuinfo; elsewhere
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
    return {"model": model, "flags": [f for f in CPU_FLAGS if f in flags], "cores": os.cpu_count()}


def demo_record(result: dict[str, Any], store: Any, wall_seconds: float) -> dict[str, Any]:
    """What `bench/results/demo.json` holds of a finished demo: its wall time, each stage's seconds
    (0 for a cache hit's lookup), the encoders' precision, the machine, the corpus, SQuAD-open test
    EM of each system and how many reader rows the evaluation read and reused."""
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
    from realm_core.artifacts import ArtifactStore

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
    record = demo_record(result, store, time.perf_counter() - started)
    if RESULT.parent.is_dir():  # a checkout: the demo-timings page renders this file
        RESULT.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\n  timings:  {RESULT} ({record['wall_seconds'] / 60:.1f} min, "
              f"{'every stage computed' if record['all_computed'] else 'some stages were cache hits'})")
    print(f"  results:  {result['root']}")
    print(f"  report:   {result['report']}")
    print("  inspect one with: .venv/bin/realm inspect <artifact dir>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
