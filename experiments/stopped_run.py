"""The curve of a pretraining run stopped before its end, from its newest checkpoint: the per-step
rows averaged over windows and its held-out evaluations (`realm_reading.curve_windows`, the
same view `experiments/realm_reading.py` gives a finished run), written to
bench/results/<name>.json with the run's settings as given, for `bench/readme_tables.py` to render.
A run is stopped when its curve shows it will not reach its question (a collapse, say); this
keeps what it measured.

    .venv/bin/python experiments/stopped_run.py --checkpoints work/artifacts/checkpoints/realm_model-<key> \\
        --name NAME --commit REV --what "what the run was" [--window 25] [--config F] [--set s.f=v ...]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "experiments"))

from peers import write_result  # noqa: E402
from realm_reading import curve_windows  # noqa: E402

from realm_core.training import latest_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", required=True, help="the run's checkpoint directory (holds step-*/)")
    ap.add_argument("--name", required=True, help="bench/results/<name>.json")
    ap.add_argument("--what", required=True, help="the run, in a few words, as the table names it")
    ap.add_argument("--commit", required=True, help="the commit the run was trained at (recorded)")
    ap.add_argument("--window", type=int, default=25, help="steps averaged per row")
    ap.add_argument("--config", default=None, help="the YAML file the run was started with (recorded)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="its --set settings (recorded)")
    args = ap.parse_args()
    ckpt = latest_checkpoint(Path(args.checkpoints))
    if ckpt is None:
        print(f"error: {args.checkpoints}: expected a pretraining checkpoint directory holding step-*/", file=sys.stderr)
        raise SystemExit(2)
    curves = ckpt.state["curves"]
    write_result(args.name, {
        "what": args.what, "config_file": args.config, "overrides": args.overrides, "machine": platform.machine(),
        "commit": args.commit, "stopped_at": ckpt.step,
        "retriever_trained_from_step": next((int(r["step"]) for r in curves["steps"] if r["retriever_trained"]), None),
        "curve": curve_windows(curves["steps"], curves["evals"], args.window)})


if __name__ == "__main__":
    main()
