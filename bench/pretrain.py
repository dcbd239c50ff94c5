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
from realm_core.pretrain.heldout import article_bootstrap
from realm_core.pretrain.stage import run_pretrain


def heldout_test(rows: dict[str, list[dict]], resamples: int = 10_000) -> dict:
    """Both runs scored on the same held-out examples: accuracy on all and on the recoverable ones,
    and REALM minus null-only with 95% intervals from resampling articles."""
    realm, null = rows["REALM"], rows["null only"]
    if [(r["doc_id"], r["block_id"]) for r in realm] != [(r["doc_id"], r["block_id"]) for r in null]:
        raise SystemExit("the two runs were scored on different held-out examples")
    articles = [r["doc_id"] for r in realm]
    keep = [i for i, r in enumerate(realm) if r["recoverable"]]

    def accuracy(rs: list[dict], idx: list[int] | None = None) -> float | None:
        picked = [rs[i] for i in idx] if idx is not None else rs
        return sum(r["correct"] for r in picked) / len(picked) if picked else None

    delta, lo, hi = article_bootstrap([r["correct"] for r in realm], [r["correct"] for r in null], articles, resamples)
    gain = {"accuracy_delta": delta, "accuracy_ci95": [lo, hi], "recoverable_delta": None, "recoverable_ci95": None}
    if keep:
        d, lo, hi = article_bootstrap([realm[i]["correct"] for i in keep], [null[i]["correct"] for i in keep],
                                      [articles[i] for i in keep], resamples)
        gain.update({"recoverable_delta": d, "recoverable_ci95": [lo, hi]})
    return {"examples": len(realm), "articles": len(set(articles)), "recoverable_examples": len(keep),
            "systems": {n: {"accuracy": accuracy(rs), "recoverable_accuracy": accuracy(rs, keep),
                            "log_p": sum(r["log_p"] for r in rs) / len(rs)} for n, rs in rows.items()},
            "gain": gain}


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
                      "steps": art.read_table("pretrain_metrics").to_pylist(),
                      "heldout_rows": art.read_table("pretrain_heldout").to_pylist()}
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
        "runs": {n: {k: v for k, v in r.items() if k != "heldout_rows"} for n, r in runs.items()},
        "heldout_accuracy_gain": realm["heldout_span_accuracy"] - null["heldout_span_accuracy"],
        "heldout": heldout_test({n: r["heldout_rows"] for n, r in runs.items()}),
    }
    write_result("pretrain", result_json)
    rows = runs["REALM"]["steps"]
    plot_curves(rows, "step", ["loss", "retrieval_utility", "p_null"], ROOT / "bench" / "results" / "pretrain_curves.png",
                f"REALM pretraining, {args.preset} preset ({p.steps} steps of {p.batch_size})")
    print("wrote bench/results/pretrain_curves.png")


if __name__ == "__main__":
    main()
