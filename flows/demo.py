"""`make demo`: the full pipeline on the bundled corpus with an embedded Prefect."""

from __future__ import annotations

import sys
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


def main() -> int:
    from flows import exit_on_sigterm

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
    print(f"  results:  {result['root']}")
    print(f"  report:   {result['report']}")
    print("  inspect one with: .venv/bin/realm inspect <artifact dir>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
