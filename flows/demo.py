"""`make demo`: the full pipeline on the bundled corpus with an embedded Prefect."""

from __future__ import annotations

import sys

from realm_core.config import data_dir
from realm_core.errors import RealmError


def main() -> int:
    if not data_dir().is_dir():
        print(f"error: the bundled data is not at {data_dir()}; set REALM_DATA_DIR, or fetch it "
              "with `realm data fetch` (see data/README.md)", file=sys.stderr)
        return 2
    from flows.pipeline import full_pipeline

    try:
        result = full_pipeline(preset="demo")
    except RealmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from realm_core.artifacts import ArtifactStore

    store = ArtifactStore(result["root"])
    print("\nrealm demo finished.")
    for name, stage in result["stages"].items():
        rows = store.open(stage["artifact"]).manifest["rows"]
        counts = ", ".join(f"{n:,} {table}" for table, n in rows.items()) or ", ".join(
            f"{k} {v}" for k, v in stage["stats"].items() if isinstance(v, (int, str)))
        print(f"  {name:<8} {'cache hit' if stage['cached'] else 'computed':<9} "
              f"{stage['seconds']:>7.1f}s  {counts}")
        print(f"           {stage['artifact']}")
    print(f"  results:  {result['root']}")
    print(f"  report:   {result['report']}")
    print("  inspect one with: .venv/bin/realm inspect <artifact dir>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
