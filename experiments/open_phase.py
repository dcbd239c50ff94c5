"""The open-domain phase experiment (docs/experiments/open-phase.md): every run listed in
experiments/configs/open_phase.yaml through `realm evaluate` (each through the artifact cache, so
a second invocation recomputes nothing that finished), then every pairing of two runs on the same
test questions (experiments/paired_runs.py) into experiments/results/, then the page's table.

    .venv/bin/python experiments/open_phase.py                      # every run and pairing
    .venv/bin/python experiments/open_phase.py --only ict --only ict_open --set precision=fp32
    .venv/bin/python experiments/open_phase.py --list               # the runs, their commands

A pairing whose two runs were not both run in this invocation or an earlier one (their JSON files
under --out) is skipped and named.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

import paired_runs
import readme_tables
from peers import fail

CONFIG = ROOT / "experiments" / "configs" / "open_phase.yaml"


def load(path: Path) -> dict[str, Any]:
    """The runs and pairings, checked: every pairing names two listed runs."""
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    for name, (a, b) in spec["pairings"].items():
        for run in (a, b):
            if run not in spec["runs"]:
                fail(f"{path}: pairing {name} names run {run!r}, not among runs")
    return spec


def command(spec: dict[str, Any], run: str, out: Path, extra: list[str]) -> list[str]:
    """`realm evaluate` for one run: the base arguments, its overrides, then the caller's."""
    realm = str(Path(sys.executable).parent / "realm")
    sets = [f"--set={s}" for s in [*spec["runs"][run], *extra]]
    return [realm, "evaluate", *spec["base"], *sets, f"--json={out / f'{run}.json'}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=CONFIG, help="the runs and pairings (default: %(default)s)")
    ap.add_argument("--only", action="append", default=[], help="run only this run (repeatable); pairings "
                    "use the other runs' files from earlier invocations")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="stage.field=value added to every run, e.g. precision=fp32")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("REALM_WORK_DIR", ROOT / "work")) / "open_phase",
                    help="where each run's `realm evaluate --json` file goes (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="print each run's command and exit")
    args = ap.parse_args()
    spec = load(args.config)
    unknown = sorted(set(args.only) - set(spec["runs"]))
    if unknown:
        ap.error(f"--only {unknown[0]}: expected one of {', '.join(spec['runs'])}")
    runs = args.only or list(spec["runs"])
    if args.list:
        for run in spec["runs"]:
            print(f"{run}: {shlex.join(command(spec, run, args.out, args.overrides))}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for i, run in enumerate(runs, 1):
        cmd = command(spec, run, args.out, args.overrides)
        print(f"[{i}/{len(runs)}] {run}: {shlex.join(cmd)}", flush=True)
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            raise SystemExit(f"error: run {run} failed; rerun this command to resume it from its checkpoints")
    for name, (a, b) in spec["pairings"].items():
        missing = [r for r in (a, b) if not (args.out / f"{r}.json").is_file()]
        if missing:
            print(f"pairing {name} skipped: no result of {', '.join(missing)} under {args.out}")
            continue
        paired_runs.pair(str(args.out / f"{a}.json"), str(args.out / f"{b}.json"), "squad-open", name)
    readme_tables.main_with(["openqa_ict_open_test"])


if __name__ == "__main__":
    main()
