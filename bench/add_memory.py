"""`realm add`'s memory against the size of its input: the same command on JSONL files of
growing size (default 50 MB, and 10x that: the peer), each the command a user types on a copy
of one store, its peak resident memory read by `/usr/bin/time` and its wall seconds. An add
reads, cuts, embeds and writes its documents in bounded batches, so the peak should not grow
with the file; the ratio largest / smallest says whether it does.

The documents are real text: SQuAD v1.1 dev paragraphs (REALM_DATA_DIR), five to a document,
each document with its own id, written until the file reaches its size. The store is the tiny
preset's first index (`realm refresh-index --preset tiny`, built here once unless --root is
given): its encoder is the bundled MiniLM at 128 wordpieces, fp32.

    .venv/bin/python bench/add_memory.py                  # 50 MB and 500 MB
    .venv/bin/python bench/add_memory.py --mb 5 50        # a quicker pair, the same ratio
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from peers import fail, write_result

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work" / "add_memory"
OVERRIDES = ["--set", "embed.encoder_from=config"]  # the tiny preset's first index: the bundled encoder


def realm(args: list[str], *, timed: bool = False) -> tuple[float, float]:
    """`realm ARGS --preset tiny`: (wall seconds, peak resident MB); exits with its output on failure."""
    cmd = [str(Path(sys.executable).parent / "realm"), *args, "--preset", "tiny", *OVERRIDES]
    if timed:
        cmd = ["/usr/bin/time", "-f", "peak_kb=%M wall_s=%e", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args[:2])} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    if not timed:
        return 0.0, 0.0
    line = next(s for s in r.stderr.splitlines()[::-1] if s.startswith("peak_kb="))
    fields = dict(f.split("=") for f in line.split())
    return float(fields["wall_s"]), int(fields["peak_kb"]) / 1024


def documents_file(path: Path, megabytes: float, data_dir: Path) -> int:
    """A JSONL file of about `megabytes` MB of SQuAD paragraphs, five to a document; its documents."""
    squad = data_dir / "squad" / "squad-v1.1-dev.articles-00-39.json"
    if not squad.is_file():
        fail(f"{squad}: expected the SQuAD dev articles (set REALM_DATA_DIR)")
    paragraphs = [(a["title"].replace("_", " "), p["context"]) for a in json.loads(squad.read_text())["data"]
                  for p in a["paragraphs"]]
    target, written, n = int(megabytes * 2**20), 0, 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            group = [paragraphs[(5 * n + i) % len(paragraphs)] for i in range(5)]
            line = json.dumps({"id": f"m{n}", "title": f"{group[0][0]} ({n})",
                               "text": "\n\n".join(text for _, text in group)}) + "\n"
            f.write(line)
            written += len(line.encode())
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, nargs="+", default=[50.0, 500.0], help="input sizes in MB, smallest first")
    ap.add_argument("--root", type=Path, default=None, help="a tiny-preset store with an index (default: built "
                    "under bench/.work/add_memory)")
    ap.add_argument("--name", default="add_memory", help="the result file, bench/results/NAME.json")
    args = ap.parse_args()
    if sorted(args.mb) != args.mb or len(args.mb) < 2:
        fail(f"--mb {args.mb}: expected two or more sizes, smallest first")
    data_dir = Path(os.environ.get("REALM_DATA_DIR", ROOT.parent / "shared" / "data"))
    t_run = time.perf_counter()
    WORK.mkdir(parents=True, exist_ok=True)
    store = args.root or WORK / "store"
    if args.root is None and not (store / "index" / "CURRENT").is_file():
        print(f"building the tiny preset's first index in {store} ...", flush=True)
        realm(["refresh-index", "--root", str(store)])
    from realm_core.knowledge.versions import KnowledgeCorpus

    rows: list[dict[str, Any]] = []
    for mb in args.mb:
        copy = WORK / f"copy-{mb:g}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(store, copy, symlinks=True)
        shutil.rmtree(copy / "knowledge", ignore_errors=True)
        seed = WORK / "seed.jsonl"  # the first version (the pretraining corpus) made apart from the add measured
        seed.write_text(json.dumps({"id": "seed", "title": "Seed", "text": "A first document."}) + "\n")
        realm(["add", str(seed), "--root", str(copy)])
        source = WORK / f"documents-{mb:g}mb.jsonl"
        docs = documents_file(source, mb, data_dir)
        print(f"realm add {source.name} ({mb:g} MB, {docs:,} documents) ...", flush=True)
        seconds, peak = realm(["add", str(source), "--root", str(copy)], timed=True)
        current = KnowledgeCorpus(copy / "knowledge").current()
        assert current is not None
        blocks = int(current.manifest["counts"]["blocks_added"])
        rows.append({"input_mb": mb, "documents": docs, "blocks_added": blocks, "peak_rss_mb": round(peak, 1),
                     "seconds": round(seconds, 1), "blocks_per_s": round(blocks / seconds, 1)})
        print(f"  {blocks:,} blocks in {seconds:.0f} s, peak {peak:,.0f} MB", flush=True)
        shutil.rmtree(copy)
        source.unlink()
    result = {"machine": platform.machine(), "cores": os.cpu_count(), "preset": "tiny", "sizes": rows,
              "peer": f"the same add of a {args.mb[-1] / args.mb[0]:g}x smaller file",
              "peak_ratio_largest_over_smallest": round(rows[-1]["peak_rss_mb"] / rows[0]["peak_rss_mb"], 3),
              "wall_seconds": round(time.perf_counter() - t_run, 1)}
    print(f"peak resident memory, {args.mb[-1]:g} MB over {args.mb[0]:g} MB of input: "
          f"{result['peak_ratio_largest_over_smallest']:.2f}x")
    write_result(args.name, result)


if __name__ == "__main__":
    main()
