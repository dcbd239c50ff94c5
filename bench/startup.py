"""Start-up of a `realm` command with the bytecode `make` writes at install, against the same
command with none (the peer), interleaved in this one run on the same artifact root.

Where PYTHONDONTWRITEBYTECODE is set, as on this project's machines, Python never writes the
`.pyc` files it compiles, so without bytecode written at install every process (each `realm`
command, torchrun rank, Prefect worker, spaCy process) compiles transformers, torch and sklearn
from source again. The peer reproduces that: PYTHONPYCACHEPREFIX points at a directory holding only
the standard library's bytecode (compiled into it first, as the interpreter's install ships it),
so Python compiles every installed package and project module it imports, as a venv installed
without bytecode did.

Measured: `realm --help` (the CLI alone) and `realm search --retriever bm25` on the `tiny`
preset's blocks (a question's whole path on the command line: config, artifacts, tokenizer,
BM25), wall seconds, median of `--rounds`. Needs REALM_DATA_DIR for the tiny corpus (chunked
first into `--root`, by default a directory under bench/.work). Writes bench/results/startup.json.

    .venv/bin/python bench/startup.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

REALM = str(Path(sys.executable).parent / "realm")
QUESTION = "What was Warsaw the capital of until 1796?"


def run(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([REALM, *args], env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"realm {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians reported")
    ap.add_argument("--root", type=Path, default=ROOT / "bench" / ".work" / "startup",
                    help="artifact root holding (or to hold) the tiny preset's blocks")
    args = ap.parse_args()

    base = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    base.pop("PYTHONPYCACHEPREFIX", None)
    tiny = ["--preset", "tiny", "--root", str(args.root)]
    print(f"chunking the tiny corpus into {args.root} (cached after the first run)")
    run(["chunk", *tiny], base)
    commands = {"realm --help": ["--help"],
                "realm search --retriever bm25": ["search", QUESTION, "--retriever", "bm25", "-k", "3", "--json", *tiny]}
    seconds: dict[str, dict[str, list[float]]] = {c: {"bytecode": [], "none": []} for c in commands}
    with tempfile.TemporaryDirectory() as prefix:
        peer = {**base, "PYTHONPYCACHEPREFIX": prefix}  # the stdlib's .pyc only; writes none
        subprocess.run([sys.executable, "-m", "compileall", "-qq", "-j", "0", sysconfig.get_paths()["stdlib"]],
                       env=peer, check=False)  # a few stdlib test files do not compile: harmless
        for r in range(args.rounds):
            for name, argv in commands.items():
                seconds[name]["bytecode"].append(run(argv, base))
                seconds[name]["none"].append(run(argv, peer))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{n}: {s['bytecode'][-1]:.1f} s vs {s['none'][-1]:.1f} s" for n, s in seconds.items()))
    result = {
        "peer": "the same command with no bytecode but the standard library's (PYTHONPYCACHEPREFIX at a "
                "directory holding only the stdlib's, PYTHONDONTWRITEBYTECODE=1), interleaved in this run",
        "rounds": args.rounds, "cpus": os.cpu_count(),
        "commands": {name: {"bytecode_s": round(statistics.median(s["bytecode"]), 2),
                            "no_bytecode_s": round(statistics.median(s["none"]), 2),
                            "speedup": round(statistics.median(s["none"]) / statistics.median(s["bytecode"]), 2)}
                     for name, s in seconds.items()},
    }
    for name, c in result["commands"].items():
        print(f"{name}: {c['bytecode_s']:.2f} s with bytecode, {c['no_bytecode_s']:.2f} s without: {c['speedup']:.2f}x")
    write_result("startup", result)


if __name__ == "__main__":
    main()
