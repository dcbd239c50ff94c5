"""Paired EM difference of the same systems between two `realm evaluate --json` runs (e.g. two
reader starts): per system, run A minus run B on the same questions, with a 95% bootstrap
interval and McNemar's exact p, from the two runs' `openqa_predictions` tables; each run's own
figures are copied beside them.

    .venv/bin/python experiments/paired_runs.py experiments/results/openqa_bm25.json \\
        experiments/results/openqa_bm25_warmup.json --name openqa_reader_start

A side is a `realm evaluate --json` file (each question's outcome read from the file where it
keeps them, else from the predictions of the artifact it names) or side a or b of an earlier
result of this script (`RESULT.json:a`): the result keeps both sides' outcomes, so a later run
pairs with either after their artifacts are gone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from lab import write_result
from peers import fail

from realm_core.errors import RealmError
from realm_core.openqa import outcomes
from realm_core.openqa.outcomes import Outcomes
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap


def load_side(arg: str, dataset: str) -> tuple[dict[str, Any], Outcomes]:
    """One side of the pairing: (the run's figures as the result keeps them, its outcomes on
    `dataset`), from a `realm evaluate --json` file or a side of an earlier result (`RESULT.json:a`)."""
    path, side = (arg[:-2], arg[-1]) if arg.endswith((":a", ":b")) else (arg, "")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{path}: not a readable JSON file ({e})")
    if side:
        if "outcomes" not in data:
            fail(f"{path}: written before paired results kept each question's outcome; "
                 "pair the run's own `realm evaluate --json` file instead")
        if data["dataset"] != dataset:
            fail(f"{path}: paired on {data['dataset']}, not {dataset}")
        return data["runs"][side], _decode(data["outcomes"][side], f"{path} (side {side})")
    if "artifact" not in data:
        fail(f"{path}: not a `realm evaluate --json` file (no 'artifact'); "
             "for a side of an earlier pairing, write RESULT.json:a or :b")
    # each run's own figures beside the differences (EM, F1, R@k per system; the gold-paragraph
    # phase's budget and dev curve; each system's budget, the open-domain phase's curve and
    # seconds among it; the warm starts' stats and configs; the evaluation's stats and peak
    # memory), so what README quotes of either run is in the file
    run = {"json": path, "systems": data["results"][dataset]["systems"],
           "gold_reader": data.get("gold_reader"), "budget": data.get("budget"),
           "finetune": data.get("finetune"), "warm_starts": data.get("warm_starts"),
           "warm_start_configs": data.get("warm_start_configs"),
           "evaluation": data.get("stats"), "peak_rss_gb": data.get("peak_rss_gb")}
    if dataset in data.get("outcomes", {}):
        return run, _decode(data["outcomes"][dataset], path)
    predictions = Path(data["artifact"]) / "openqa_predictions"
    if not predictions.exists():
        fail(f"{path}: its evaluation artifact {data['artifact']} is gone and the file keeps no "
             "outcomes (written before `realm evaluate --json` kept them)")
    return run, outcomes.from_predictions(pq.read_table(predictions).to_pylist(), dataset)


def _decode(kept: dict[str, Any], where: str) -> Outcomes:
    try:
        return outcomes.decode(kept, where)
    except RealmError as e:
        fail(str(e))


def pair(a_arg: str, b_arg: str, dataset: str, name: str) -> dict[str, Any]:
    """Run A minus run B per system on `dataset`'s shared questions, written to
    experiments/results/<name>.json (both sides' figures and outcomes kept); returns the result."""
    (run_a, a), (run_b, b) = (load_side(arg, dataset) for arg in (a_arg, b_arg))
    rows = {}
    for system in sorted(set(a) & set(b)):
        qids = sorted(a[system])
        if sorted(b[system]) != qids:
            fail(f"{system}: the two runs answered different questions")
        x, y = [a[system][q] for q in qids], [b[system][q] for q in qids]
        delta, lo, hi = paired_bootstrap(x, y)
        rows[system] = {"questions": len(qids), "delta": delta, "ci95": [lo, hi], "mcnemar_p": mcnemar_p(x, y)}
        print(f"{system}: {100 * delta:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] on {len(qids)} questions")
    result = {"a": a_arg, "b": b_arg, "dataset": dataset, "paired": rows, "runs": {"a": run_a, "b": run_b},
              "outcomes": {"a": outcomes.encode(a), "b": outcomes.encode(b)}}
    write_result(name, result)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="a `realm evaluate --json` file, or RESULT.json:a|b (a side of an earlier result)")
    ap.add_argument("b", help="the same, for the side subtracted")
    ap.add_argument("--dataset", default="squad-open",
                    help="the dataset whose questions are paired (default: squad-open; also nq, wq, ct)")
    ap.add_argument("--name", required=True, help="experiments/results/<name>.json")
    args = ap.parse_args()
    pair(args.a, args.b, args.dataset, args.name)


if __name__ == "__main__":
    main()
