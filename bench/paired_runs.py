"""Paired EM difference of the same systems between two `realm evaluate --json` runs (e.g. two
reader starts): per system, run A minus run B on the same questions, with a 95% bootstrap
interval and McNemar's exact p, from the two runs' `openqa_predictions` tables; each run's own
figures are copied beside them.

    .venv/bin/python bench/paired_runs.py bench/results/openqa_bm25.json \\
        bench/results/openqa_bm25_warmup.json --name openqa_reader_start
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers import write_result  # noqa: E402

from realm_core.openqa.significance import mcnemar_p, paired_bootstrap


def correct(artifact: str, dataset: str) -> dict[str, dict[str, bool]]:
    """system -> qid -> correct, on one dataset of one evaluation artifact."""
    out: dict[str, dict[str, bool]] = {}
    for r in pq.read_table(Path(artifact) / "openqa_predictions").to_pylist():
        if r["dataset"] == dataset:
            out.setdefault(r["system"], {})[r["qid"]] = r["correct"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--dataset", default="squad-open")
    ap.add_argument("--name", required=True, help="bench/results/<name>.json")
    args = ap.parse_args()
    runs = {p: json.loads(p.read_text()) for p in (args.a, args.b)}
    a, b = (correct(run["artifact"], args.dataset) for run in runs.values())
    rows = {}
    for system in sorted(set(a) & set(b)):
        qids = sorted(a[system])
        if sorted(b[system]) != qids:
            raise SystemExit(f"{system}: the two runs answered different questions")
        x, y = [a[system][q] for q in qids], [b[system][q] for q in qids]
        delta, lo, hi = paired_bootstrap(x, y)
        rows[system] = {"questions": len(qids), "delta": delta, "ci95": [lo, hi], "mcnemar_p": mcnemar_p(x, y)}
        print(f"{system}: {100 * delta:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] on {len(qids)} questions")
    # each run's own figures beside the differences (EM, F1, R@k per system; the gold-paragraph
    # phase's budget and dev curve; each system's budget, the open-domain phase's curve and
    # seconds among it; the warm starts' stats and configs; the evaluation's stats and peak memory), so what
    # README quotes of either run is in the file
    runs_out = {side: {"json": str(path), "systems": run["results"][args.dataset]["systems"],
                       "gold_reader": run.get("gold_reader"), "budget": run.get("budget"),
                       "finetune": run.get("finetune"), "warm_starts": run.get("warm_starts"),
                       "warm_start_configs": run.get("warm_start_configs"),
                       "evaluation": run.get("stats"), "peak_rss_gb": run.get("peak_rss_gb")}
                for side, (path, run) in zip(("a", "b"), runs.items(), strict=True)}
    write_result(args.name, {"a": str(args.a), "b": str(args.b), "dataset": args.dataset, "paired": rows,
                             "runs": runs_out})


if __name__ == "__main__":
    main()
