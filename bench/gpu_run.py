"""The GPU session, one command: on a machine with an accelerator (the project's packages and the
bundled encoder installed beside its torch), in this order, each timed:

1. the `gpu` preset's pretraining pair through the stage graph: the corpus, ICT, the reader's
   warm-ups, REALM and null-only on the same batches and their comparison (`realm_gain`);
   the record goes to <out>/gpu_pair.json;
2. the mechanism experiment at full size (experiments/realm_mechanism.py at its GPU budget),
   its result to <out>/realm_mechanism_gpu.json;
3. bench/gpu.py (embedding and REALM-step throughput against their peers) on the gpu preset's
   corpus, exported from the same store, to <out>/gpu.json.

<out> is --out, else bench/results (experiments/results for the mechanism). Each step is skipped
once its result file exists, so a session cut short runs again
from where it stopped (the stages also resume from their checkpoints). `--set` cuts the
budgets: `make test` runs this file on the CPU with the tiny preset's corpus and a few steps,
the same code path.

    PYTHONPATH=. python bench/gpu_run.py             # bench/results and experiments/results
    PYTHONPATH=. python bench/gpu_run.py --out $OUT  # all three in one folder
    PYTHONPATH=. python bench/gpu_run.py --preset tiny --set ... --mechanism-args "..." --out /tmp/x
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# the mechanism's budget on one H200 (docs/experiments/realm-mechanism.md, "At a GPU budget")
MECHANISM_GPU = ("--set pretrain.steps=600 --set pretrain.batch_size=32 --set precision=bf16 "
                 "--name realm_mechanism_gpu")


def device() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.machine()})",
            "torch": torch.__version__, "host": platform.node()}


def pretraining_pair(preset: str, overrides: list[str]) -> dict[str, Any]:
    """Step 1: the gain pair through the graph, each stage's seconds, the comparison's stats."""
    import logging

    from realm_core.config import load_config, work_dir
    from realm_core.graph.resolver import Resolver
    from realm_core.progress import LogProgress
    from realm_core.store.artifacts import ArtifactStore

    cfg = load_config(preset, None, overrides)
    log = logging.getLogger("bench.gpu_run")
    resolver = Resolver(cfg, ArtifactStore(work_dir() / "artifacts"), progress=lambda: LogProgress(log, every=30))
    gain = resolver.run("realm_gain")
    if gain.ref is None:
        raise SystemExit(f"error: preset {preset!r}: gain.enabled is off; the pair needs it")
    stages = {name: round(run.seconds, 1) for name, run in resolver.runs.items()}
    return {"preset": preset, "overrides": overrides, **device(), "stages": stages,
            "pretrain_steps": cfg.pretrain.steps, "batch_size": cfg.pretrain.batch_size, "top_k": cfg.pretrain.top_k,
            "seconds_per_step": {name: round(resolver.runs[name].stats["wall_seconds"] / cfg.pretrain.steps, 4)
                                 for name in ("pretrain", "pretrain_null")},
            "gain": gain.stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="gpu", help="the pair's preset (gpu; tiny to check the script)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="stage.field=value for the pair")
    ap.add_argument("--mechanism-args", default=MECHANISM_GPU, help="arguments of experiments/realm_mechanism.py")
    ap.add_argument("--bench-args", default="", help="arguments of bench/gpu.py's measurement (e.g. --max-blocks 64)")
    ap.add_argument("--out", type=Path, default=None,
                    help="one folder for the three results (on a lent machine, $OUT); default: the repository's, "
                         "gpu_pair.json and gpu.json in bench/results, realm_mechanism_gpu.json in experiments/results")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    product, lab = ((args.out, args.out) if args.out is not None
                    else (ROOT / "bench" / "results", ROOT / "experiments" / "results"))
    for folder in (product, lab):
        folder.mkdir(parents=True, exist_ok=True)
    # the lab's modules (bench/, experiments/) import each other as `make venv`'s realm-lab.pth lets
    # them; a machine set up from the carried wheels alone has no such file
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench"), str(ROOT / "experiments"),
                                                        os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()

    pair = product / "gpu_pair.json"
    if not pair.is_file():
        result = pretraining_pair(args.preset, args.overrides)
        pair.write_text(json.dumps(result, indent=2) + "\n")
    print(f"pretraining pair: {pair} ({time.perf_counter() - t0:.0f} s so far)", flush=True)

    mechanism = lab / "realm_mechanism_gpu.json"
    if not mechanism.is_file():
        run = subprocess.run([sys.executable, str(ROOT / "experiments" / "realm_mechanism.py"),
                              *shlex.split(args.mechanism_args), "--out", str(mechanism)], env=env)
        if run.returncode != 0:
            raise SystemExit(f"error: experiments/realm_mechanism.py exited {run.returncode}")
    print(f"mechanism: {mechanism} ({time.perf_counter() - t0:.0f} s so far)", flush=True)

    throughput = product / "gpu.json"
    if not throughput.is_file():
        inputs = product / ".gpu-inputs"
        export = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--export", str(inputs), "--export-preset",
                  args.preset, *[a for s in args.overrides for a in ("--set", s)]]
        measure = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--inputs", str(inputs), "--out", str(throughput),
                   *shlex.split(args.bench_args)]
        for command in (export, measure):
            if (code := subprocess.run(command, env=env).returncode) != 0:
                raise SystemExit(f"error: {' '.join(command[1:3])} exited {code}")
    print(f"throughput: {throughput}; the session took {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
