"""The curve of a pretraining run, stopped before its end (from its newest checkpoint) or finished
(from its published `realm_model` artifact): the per-step rows averaged over windows and its
held-out evaluations (`realm_reading.curve_windows`, the same view `experiments/realm_reading.py`
gives the runs it finds at the current config), written to bench/results/<name>.json with the
run's settings as given, for `bench/readme_tables.py` to render. A run is stopped when its curve
shows it will not reach its question (a collapse, say); this keeps what it measured. A finished
run is named by its artifact where the current code's cache key no longer finds it (a run trained
at an earlier commit). Either is verified against its recorded hashes first.

    .venv/bin/python experiments/stopped_run.py --checkpoints work/artifacts/checkpoints/realm_model-<key> \\
        --name NAME --commit REV --what "what the run was" [--window 25] [--config F] [--set s.f=v ...]
    .venv/bin/python experiments/stopped_run.py --run work/artifacts/realm_model/<key> --name NAME ...
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

from peers import fail, write_result  # noqa: E402
from realm_reading import curve_windows  # noqa: E402

from realm_core.artifacts import ArtifactStore
from realm_core.errors import RealmError
from realm_core.training import latest_checkpoint


def finished_curves(run: Path) -> tuple[int, dict[str, list[dict[str, float]]]]:
    """(the run's last step, its per-step rows and held-out evaluations) from a published
    `realm_model` artifact, its files verified first."""
    store = ArtifactStore(run.parent.parent)
    art = store.open(str(run), kind="realm_model")
    art.verify(store.verify)
    return int(art.manifest["config"]["steps"]), {"steps": art.read_table("pretrain_metrics").to_pylist(),
                                                  "evals": art.read_table("pretrain_eval").to_pylist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoints", help="a stopped run's checkpoint directory (holds step-*/)")
    source.add_argument("--run", help="a finished run's realm_model artifact directory")
    ap.add_argument("--name", required=True, help="bench/results/<name>.json")
    ap.add_argument("--what", required=True, help="the run, in a few words, as the table names it")
    ap.add_argument("--commit", required=True, help="the commit the run was trained at (recorded)")
    ap.add_argument("--window", type=int, default=25, help="steps averaged per row")
    ap.add_argument("--config", default=None, help="the YAML file the run was started with (recorded)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="its --set settings (recorded)")
    args = ap.parse_args()
    try:
        if args.run:
            last, curves = finished_curves(Path(args.run))
            end = {"finished_at": last}
        else:
            ckpt = latest_checkpoint(Path(args.checkpoints))
            if ckpt is None:
                fail(f"{args.checkpoints}: expected a pretraining checkpoint directory holding step-*/")
            curves, end = ckpt.state["curves"], {"stopped_at": ckpt.step}
    except RealmError as e:
        fail(str(e))
    write_result(args.name, {
        "what": args.what, "config_file": args.config, "overrides": args.overrides, "machine": platform.machine(),
        "commit": args.commit, **end,
        "retriever_trained_from_step": next((int(r["step"]) for r in curves["steps"] if r["retriever_trained"]), None),
        "curve": curve_windows(curves["steps"], curves["evals"], args.window)})


if __name__ == "__main__":
    main()
