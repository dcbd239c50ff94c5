"""REALM against its null-only baseline (the BERT row of REALM Table 2) on the demo preset: the
same masked salient-span examples, steps, batch and learning rate; one retrieves the top-k blocks
plus the null block and marginalises, the other reads the null block alone. Held-out masked
span accuracy (articles never trained on), retrieval utility and p(null) at the end, time the
trainer spent blocked on the asynchronous index refresh, and the curves as PNG.

Runs go through the artifact cache of the work dir (`make demo` trains the REALM run already).

    .venv/bin/python bench/pretrain.py [--preset demo] [--root work/artifacts]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers import write_result  # noqa: E402

from realm_core.artifacts import ArtifactStore
from realm_core.config import load_config, work_dir
from realm_core.curves import plot_curves
from realm_core.graph import Resolver
from realm_core.pretrain.stage import run_pretrain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    cfg = load_config(args.preset)
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    t0 = time.perf_counter()
    stages = Resolver(cfg, store)
    blocks, spans, ict = stages.run("chunk"), stages.run("spans"), stages.run("ict")
    runs = {}
    for name, over in (("REALM", {}), ("null only", {"retrieval": "null_only"})):
        p = cfg.pretrain.model_copy(update=over)
        result = run_pretrain(store, blocks.ref, spans.ref, ict.ref, p, cfg.masking, cfg.embed, cfg.index)
        art = store.open(result.ref)
        runs[name] = {"artifact": result.ref.path, "stats": result.stats,
                      "eval": art.read_table("pretrain_eval").to_pylist(),
                      "steps": art.read_table("pretrain_metrics").to_pylist()}
        print(name, json.dumps(result.stats))
    p = cfg.pretrain
    realm, null = runs["REALM"]["stats"], runs["null only"]["stats"]
    result_json = {
        "preset": args.preset, "machine": platform.machine(), "seconds": round(time.perf_counter() - t0, 1),
        "budget": {"steps": p.steps, "batch_size": p.batch_size, "learning_rate": p.learning_rate,
                   "reader_mlm_steps": p.reader_mlm.steps, "reader_mlm_batch_size": p.reader_mlm.batch_size,
                   "heldout_every": p.heldout_every, "eval_examples": p.eval_examples,
                   "retriever_lr_scale": p.retriever_lr_scale,
                   "top_k": p.top_k, "reader_length": p.reader_length, "refresh_every": p.refresh_every,
                   "sync_refresh": p.sync_refresh, "relevance": p.relevance, "masking": cfg.masking.strategy},
        "runs": runs,
        "heldout_accuracy_gain": realm["heldout_span_accuracy"] - null["heldout_span_accuracy"],
    }
    write_result("pretrain", result_json)
    rows = runs["REALM"]["steps"]
    plot_curves(rows, "step", ["loss", "retrieval_utility", "p_null"], ROOT / "bench" / "results" / "pretrain_curves.png",
                f"REALM pretraining, {args.preset} preset ({p.steps} steps of {p.batch_size})")
    print("wrote bench/results/pretrain_curves.png")


if __name__ == "__main__":
    main()
