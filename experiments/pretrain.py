"""REALM against its null-only baseline (the BERT row of REALM Table 2) on the demo preset: the
same masked salient-span examples, steps, batch and learning rate; one retrieves the top-k blocks
plus the null block and marginalises, the other reads the null block alone. Held-out masked
span accuracy (articles never trained on), retrieval utility and p(null) at the end, time the
trainer spent blocked on the asynchronous index refresh, and the curves as PNG.

Both are scored on the same held-out examples (drawn at random over held-out articles), on all
of them and on the recoverable ones, with REALM minus null-only and a 95% interval from
resampling articles (`heldout`). `--table` runs every row of REALM Table 2 at the same budget
(`experiments/ablations.py`: random spans and tokens, a 30x staler index, the retriever's
learning rate, relevance from the index) and adds an `ablations` row for each, paired with REALM
where the row masks the same wordpieces. `--config FILE` / `--set` give the same experiment a
larger budget (a GPU) unchanged.

`zero_shot` is SQuAD-open dev recall@5/@20 of the warm-started retriever before and of REALM's
encoders after pretraining, paired on the same questions.

Runs go through the artifact cache of the work dir (`make demo` trains the REALM run already).

    .venv/bin/python experiments/pretrain.py [--preset demo] [--root work/artifacts] [--table] [--config F] [--set s.f=v]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from ablations import table2
from lab import config_arguments, config_from, write_result

from realm_core.config import PipelineConfig, work_dir
from realm_core.curves import plot_curves
from realm_core.graph.resolver import Resolver
from realm_core.pretrain.heldout import article_bootstrap
from realm_core.pretrain.summary import collapse_window
from realm_core.progress import LogProgress
from realm_core.store.artifacts import ArtifactRef, ArtifactStore

log = logging.getLogger("bench.pretrain")


def heldout_test(rows: dict[str, list[dict[str, Any]]], resamples: int = 10_000) -> dict[str, Any]:
    """Both runs scored on the same held-out examples, as the pipeline's `realm_gain` stage
    compares them (`realm_core.pretrain.gain.heldout_test`); `recoverable_examples` is the name
    this script's results files and their pages use for the recoverable count."""
    from realm_core.pretrain.gain import heldout_test as paired

    out = paired(rows["REALM"], rows["null only"], resamples)
    return {**out, "recoverable_examples": out["recoverable"]}


def ablation_row(name: str, run: dict[str, Any], realm: dict[str, Any], resamples: int = 10_000) -> dict[str, Any]:
    """One Table 2 row: held-out accuracy (all, recoverable), log p, wall, and the row minus
    REALM on the same examples with a 95% interval over articles."""
    rows, base = run["heldout_rows"], realm["heldout_rows"]
    keep = [i for i, r in enumerate(rows) if r["recoverable"]]
    st = run["stats"]
    out = {"name": name, "overrides": run["overrides"], "masking": st["masking"],
           "accuracy": st["heldout_span_accuracy"],
           "recoverable_accuracy": (sum(rows[i]["correct"] for i in keep) / len(keep)) if keep else None,
           "log_p": sum(r["log_p"] for r in rows) / len(rows), "retrieval_utility": st["heldout_retrieval_utility"],
           "p_null": st["heldout_p_null"], "wall_seconds": st["wall_seconds"],
           "minus_realm": None, "minus_realm_ci95": None}
    # paired only on the same held-out examples: a row that masks differently predicts other
    # wordpieces, and its accuracy is its own task's, not comparable with REALM's
    if [(r["doc_id"], r["block_id"], r["recoverable"]) for r in rows] == [
            (r["doc_id"], r["block_id"], r["recoverable"]) for r in base] and st["masking"] == realm["stats"]["masking"]:
        delta, lo, hi = article_bootstrap([r["correct"] for r in rows], [r["correct"] for r in base],
                                          [r["doc_id"] for r in base], resamples)
        out.update({"minus_realm": delta, "minus_realm_ci95": [lo, hi]})
    return out


def zero_shot(cfg: PipelineConfig, store: ArtifactStore, resolver: Resolver, realm_ref: ArtifactRef | None) -> dict[str, Any]:
    """SQuAD-open dev recall@5/@20 (articles 30-34, every demo block a candidate, DPR's
    has_answer rule) of the warm-started retriever before REALM pretraining and of REALM's
    encoders after it, each system's blocks embedded by its own document encoder (through the
    embed cache); after minus before paired on the same questions with a 95% bootstrap interval."""
    from realm_core.openqa.significance import paired_bootstrap
    from realm_core.retrieval.evaluation import RetrieverSystem, run_evaluate_retrieval
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir

    if realm_ref is None or cfg.pretrain.warm_start == "none":
        raise SystemExit("zero-shot recall needs REALM's run and a warm-started retriever (pretrain.warm_start)")
    dev = next(s for s in cfg.questions.sources if s.dataset == "squad-open" and s.split == "dev")
    warm = resolver.ref(cfg.pretrain.warm_start)
    systems = [RetrieverSystem(name, "dense", query_encoder_dir(ref),
                               cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(ref)}))
               for name, ref in (("before", warm), ("after", realm_ref))]
    ecfg = cfg.retrieval_eval.model_copy(update={"squad_path": dev.path, "squad_articles": dev.articles,
                                                 "dpr_path": None, "ks": (5, 20)})
    result = run_evaluate_retrieval(store, resolver.ref("chunk"), systems, ecfg)
    assert result.ref is not None
    art = store.open(result.ref)
    rows = art.read_table("retrieval_results").to_pylist()
    hits = {name: [r["first_hit"] for r in rows if r["system"] == name] for name in ("before", "after")}
    if [r["qid"] for r in rows if r["system"] == "before"] != [r["qid"] for r in rows if r["system"] == "after"]:
        raise SystemExit("zero-shot: the two systems were scored on different questions")
    recall = art.manifest["results"]["squad-open"]["systems"]  # the stage's own recall_metrics
    articles = list(dev.articles) if dev.articles is not None else None
    out: dict[str, Any] = {"questions": len(hits["before"]), "articles": articles, "warm_start": cfg.pretrain.warm_start}
    for name in hits:
        out[name] = {f"R@{k}": recall[name][f"R@{k}"] for k in (5, 20)}
    for k in (5, 20):
        delta, lo, hi = paired_bootstrap([0 < x <= k for x in hits["after"]], [0 < x <= k for x in hits["before"]])
        out[f"R@{k} after - before"] = {"delta": delta, "ci95": [lo, hi]}
    return out


def steps_of(art: Any) -> list[dict[str, Any]]:
    """A pretraining artifact's logged steps."""
    steps: list[dict[str, Any]] = art.read_table("pretrain_metrics").to_pylist()
    return steps


def curves(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A run's learning curves: each logged step's loss, retrieval utility, p(null) and share of
    examples whose span a retrieved block held, and the same on the held-out test at each evaluation beside its span accuracy."""
    keep = ("step", "loss", "span_accuracy", "retrieval_utility", "p_null", "answer_retrieved", "p_holder")
    return {"steps": [{k: r.get(k) for k in keep} for r in run["steps"]],
            "evals": [{"step": r["step"], "heldout_accuracy": r["span_accuracy"],
                       "p_null": r.get("p_null"), "retrieval_utility": r.get("retrieval_utility"),
                       "answer_retrieved": r.get("answer_retrieved"), "p_holder": r.get("p_holder")}
                      for r in run["eval"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config_arguments(ap)
    ap.add_argument("--root", default=None, help="artifact store (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--table", action="store_true",
                    help="every REALM Table 2 row (experiments/ablations.py), not just REALM and null-only")
    ap.add_argument("--name", default="pretrain", help="experiments/results/<name>.json")
    args = ap.parse_args()
    cfg = config_from(args)
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    t0 = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    progress = lambda: LogProgress(log, every=60)  # noqa: E731  a line a minute: the runs take hours
    rows = table2(cfg)
    names = list(rows) if args.table else list(rows)[:2]
    runs = {}
    realm_ref = None
    for i, name in enumerate(names, 1):
        log.info("row %d of %d: %s %s", i, len(names), name, " ".join(rows[name]) or "(the preset)")
        variant = config_from(args, *rows[name])
        # through the cache: upstream stages (ICT, index, reader warm-up) are shared by the rows
        result = Resolver(variant, store, progress=progress).run("pretrain")
        assert result.ref is not None
        realm_ref = realm_ref or result.ref  # the first row is REALM's own run
        art = store.open(result.ref)
        runs[name] = {"overrides": list(rows[name]), "artifact": result.ref.path, "stats": result.stats,
                      "eval": art.read_table("pretrain_eval").to_pylist(),
                      "steps": steps_of(art),
                      "heldout_rows": art.read_table("pretrain_heldout").to_pylist()}
        print(name, json.dumps(result.stats))
    runs["null only"] = runs.pop("null only (BERT baseline)")
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
        # each run's logged steps are kept once, in `curves`; its held-out rows only as `heldout`
        "runs": {n: {k: v for k, v in r.items() if k not in ("heldout_rows", "steps")} for n, r in runs.items()},
        "config": {"reader_length": p.reader_length, "query_length": cfg.masking.query_length,
                   "doc_length": p.doc_length, "retriever_frozen_steps": p.retriever_frozen_steps,
                   "utility_window": collapse_window(p),
                   "config_file": args.config, "overrides": args.overrides},
        "curves": {n: curves(r) for n, r in runs.items()},
        "heldout_accuracy_gain": realm["heldout_span_accuracy"] - null["heldout_span_accuracy"],
        "heldout": heldout_test({n: runs[n]["heldout_rows"] for n in ("REALM", "null only")}),
        "ablations": [ablation_row(n, r, runs["REALM"]) for n, r in runs.items()],
        "zero_shot": zero_shot(cfg, store, Resolver(cfg, store, progress=progress), realm_ref),
    }
    write_result(args.name, result_json)
    rows = runs["REALM"]["steps"]
    png = ROOT / "bench" / "results" / f"{args.name}_curves.png"
    plot_curves(rows, "step", ["loss", "retrieval_utility", "p_null", "answer_retrieved"], png,
                f"REALM pretraining, {args.preset} preset ({p.steps} steps of {p.batch_size})")
    print(f"wrote {png.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
