"""Does REALM's pretraining reader copy a span from a block that holds it, on real text?

Retrieval taken out of the question: for every recoverable held-out example (its masked span
occurs, as whole words, in a block that is not a trivial retrieval of its query) the oracle block
is the one of those blocks the warm-started retriever scores highest
(`realm_core/pretrain/reading.py`). Each reader predicts the span twice, reading the null block
alone and reading the oracle block alone; oracle minus null, paired on the same examples with a
95% interval from resampling articles, is what copying is worth to it. The readers:

- the masked-LM warm-up reader that REALM and null-only start from,
- REALM's and the null-only run's readers after pretraining, where `experiments/pretrain.py`
  with the same `--config`/`--set` has trained them (skipped, and said so, where not).

Teaching a reader to copy is the pipeline's `reader_copy` stage (its held-out curve in its
report); this script measures readers, it trains none.

Where the masked-LM warm-up is off (`--set pretrain.reader_mlm.steps=0`), the reader the runs
start from is `pretrain.reader_encoder` ("starting reader"), e.g. a copy-trained one.

For each pretraining run whose encoders trained, retrieval by its own encoders: per recoverable
example the rank of the best allowed block that holds the span, against the warm-started
retriever's, paired on the same examples (the real-text counterpart of the mechanism
experiment's recall@1).

For the starting reader, `--eval-examples` held-out examples are also scored
as pretraining scores them: the marginal over the warm-started retriever's top-k plus the null
block (encoders frozen) against the null block alone. That is REALM's gain at its first step
for a reader that reads as well as this one.

The blocks, spans, warm-started retriever, its block embeddings and the warm-up reader come
through the artifact cache (computed where missing, shared with `experiments/pretrain.py` at the
same config); the pretraining runs are only read, never trained here.

    .venv/bin/python experiments/realm_reading.py --config experiments/configs/realm_gain.yaml [--set s.f=v]
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from ablations import table2
from lab import config_arguments, config_from, write_result
from peers import fail, logged

from realm_core.config import work_dir
from realm_core.errors import MissingArtifactError
from realm_core.graph.resolver import Resolver
from realm_core.pretrain.heldout import article_bootstrap
from realm_core.progress import LogProgress
from realm_core.store.artifacts import ArtifactStore
from realm_core.store.cache import existing_artifacts_only

log = logging.getLogger("experiments.realm_reading")


def paired(a: np.ndarray, b: np.ndarray, articles: list[str]) -> dict[str, Any]:
    """mean(a) - mean(b) on the same examples with its 95% interval over articles."""
    delta, lo, hi = article_bootstrap(np.asarray(a, float).tolist(), np.asarray(b, float).tolist(), articles)
    return {"delta": delta, "ci95": [lo, hi]}


CURVE_KEYS = ("span_accuracy", "retrieval_utility", "p_null", "answer_retrieved")
LATER_KEYS = ("p_holder",)


def run_curve(run: Any, window: int) -> dict[str, Any]:
    """A pretraining run's learning curve as its artifact recorded it: the training metrics
    averaged over windows of `window` steps, and every held-out evaluation, each with whether the
    encoders trained (`retriever_trained`) and what share of examples a retrieved block held the
    masked span for (`answer_retrieved`: how retrieval changes as it learns)."""
    return curve_windows(run.read_table("pretrain_metrics").to_pylist(),
                         run.read_table("pretrain_eval").to_pylist(), window)


def curve_windows(steps: list[dict[str, Any]], evals: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """A run's per-step rows averaged over windows of `window` steps, and its held-out
    evaluations, as `run_curve` gives them (the rows of a finished artifact or of a checkpoint)."""
    keys = CURVE_KEYS + tuple(k for k in LATER_KEYS if logged([*steps, *evals], k))
    windows = []
    for first in range(0, len(steps), window):
        part = steps[first:first + window]
        windows.append({"first_step": int(part[0]["step"]), "last_step": int(part[-1]["step"]),
                        "retriever_trained": float(np.mean([r["retriever_trained"] for r in part])),
                        **{k: float(np.mean([r[k] for r in part])) for k in keys}})
    evaluations = [{"step": int(r["step"]), "examples": int(r["examples"]), **{k: float(r[k]) for k in keys}}
                   for r in evals]
    return {"window": window, "training": windows, "heldout": evaluations}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config_arguments(ap)
    ap.add_argument("--root", default=None, help="artifact store (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--eval-examples", type=int, default=500,
                    help="held-out examples scored with retrieval against the null block alone (0: skip)")
    ap.add_argument("--name", default="realm_reading", help="experiments/results/<name>.json")
    ap.add_argument("--curve-window", type=int, default=50,
                    help="steps averaged per row of a pretraining run's training curve")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from realm_core.distributed import Placement
    from realm_core.pretrain.loop import RealmModels, evaluate
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.pretrain.reader_mlm import reader_mlm_dir
    from realm_core.pretrain.reading import (
        oracle_blocks,
        read_blocks,
    )
    from realm_core.pretrain.refresh import IndexHandle
    from realm_core.pretrain.stage import pretrain_data, run_warm_reader
    from realm_core.retrieval.embed import embed_token_ids, load_embeddings
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.index import MipsIndex
    from realm_core.retrieval.stage import run_embed_blocks
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
    from realm_core.spans.mining import open_mined

    t0 = time.perf_counter()
    root = Path(args.root) if args.root else work_dir() / "artifacts"
    store = ArtifactStore(root)
    cfg = config_from(args)
    p = cfg.pretrain
    if p.warm_start == "none":
        fail("the oracle block is the warm-started retriever's pick; pretrain.warm_start is none")
    placement = Placement.from_env(p.device, p.precision)
    # upstream through the cache (computed where missing: the blocks, spans, warm-started
    # retriever, its block embeddings and the warm-up reader); the pretraining runs only read
    resolver = Resolver(cfg, store, progress=lambda: LogProgress(log, every=60))
    blocks_ref, spans_ref, warm_ref = resolver.ref("chunk"), resolver.ref("spans"), resolver.ref(p.warm_start)
    warm_reader = run_warm_reader(store, blocks_ref, p, placement, LogProgress(log, every=60))
    emb = run_embed_blocks(store, blocks_ref, cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(warm_ref)}))
    runs: dict[str, Any] = {}
    with existing_artifacts_only():  # never train a pretraining run here
        for name, extra in list(table2(cfg).items())[:2]:  # REALM, null only
            variant = config_from(args, *extra)
            try:
                trained = Resolver(variant, store).run("pretrain")
            except MissingArtifactError:
                log.info("%s: not trained at this config (experiments/pretrain.py); its reader is left out", name)
                continue
            assert trained.ref is not None
            runs[name] = {"ref": trained.ref, "stats": trained.stats,
                          "heldout_rows": store.open(trained.ref).read_table("pretrain_heldout").to_pylist()}
    assert emb.ref is not None

    # the examples exactly as the pretraining stage builds and splits them
    data = pretrain_data(*open_mined(store, blocks_ref, spans_ref), p, cfg.masking, cfg.chunk.encoder)
    heldout, blocks, tokenizer = data.heldout, data.blocks, data.tokenizer
    for name, run in runs.items():
        if [(r["doc_id"], r["block_id"]) for r in run["heldout_rows"]] != [(e.doc_id, e.block_id) for e in heldout]:
            fail(f"{run['ref'].path}: {name} scored other held-out examples than the ones rebuilt here")

    # the warm-started retriever's pick among the allowed blocks that hold each span
    vectors = load_embeddings(Path(emb.ref.path) / "embeddings", store.open(emb.ref).manifest["embeddings"],
                              len(blocks))  # (N, D) what REALM's first index holds
    # every model this script reads runs on the run's device (a GPU where there is one), as in training
    query_encoder = RetrieverEncoder.from_pretrained(query_encoder_dir(warm_ref)).to(placement.device)
    doc_encoder = RetrieverEncoder.from_pretrained(doc_encoder_dir(warm_ref)).to(placement.device)
    continuation, locator = data.continuation, data.locator

    def oracle_for(chosen: list[Any], ranks: bool = True, encoder: Any = query_encoder,
                   block_vectors: np.ndarray = vectors) -> Any:
        """The best allowed span-holding block of each example (and its rank) under a retriever:
        the warm-started one unless `encoder` and its `block_vectors` (N, D) say otherwise."""
        q = embed_token_ids(encoder, [e.input_ids for e in chosen], tokenizer.pad_token_id, 64,
                            precision=placement.precision)  # (E, D)
        return oracle_blocks(chosen, q, block_vectors, locator, blocks, p.exclusion, ranks)

    oracle = oracle_for(heldout)
    found = np.flatnonzero(oracle.block >= 0)  # the recoverable held-out examples
    scored = [heldout[i] for i in found]
    chosen, ranks = oracle.block[found], oracle.rank[found]
    articles = [e.doc_id for e in scored]
    log.info("%d held-out examples, %d recoverable", len(heldout), len(scored))

    def read_oracle_and_null(reader: Any, progress: Any = None) -> Any:
        """Each recoverable held-out example read with its oracle block and with the null block."""
        return read_blocks(reader, scored, chosen, blocks, tokenizer, p.reader_length, continuation,
                           compute=placement.compute, progress=progress)
    for name, run in runs.items():
        flags = [bool(r["recoverable"]) for r in run["heldout_rows"]]
        if flags != [bool(h) for h in oracle.holders > 0]:
            fail(f"{name}: the stage's recoverable flags differ from the holders found here")

    # retrieval by each pretraining run's own encoders: per recoverable example the rank of the
    # best allowed block that holds its span, against the warm-started retriever's (where REALM's
    # gradient has taught retrieval, the span-holding blocks rise into the top k)
    top = p.top_k - 1
    retrieval: dict[str, Any] = {}
    for name, run in runs.items():
        run_dir = Path(run["ref"].path)
        from_step = run["stats"].get("retriever_trained_from_step")
        if from_step is None:
            continue  # the null-only run, or a run whose encoders never trained: ICT's ranks
        run_emb = run_embed_blocks(store, blocks_ref, cfg.embed.model_copy(update={"doc_encoder": str(run_dir / "doc_encoder")}))
        assert run_emb.ref is not None
        run_vectors = load_embeddings(Path(run_emb.ref.path) / "embeddings", store.open(run_emb.ref).manifest["embeddings"],
                                      len(blocks))  # (N, D)
        run_query = RetrieverEncoder.from_pretrained(str(run_dir / "query_encoder")).to(placement.device)
        run_rank = oracle_for(scored, encoder=run_query, block_vectors=run_vectors).rank  # (E,)
        retrieval[name] = {
            "trained_from_step": from_step, "steps": run["stats"]["steps"],
            "median_rank": {"start": float(np.median(ranks)), "end": float(np.median(run_rank))},
            f"within_top_{top}": {"start": float(np.mean(ranks <= top)), "end": float(np.mean(run_rank <= top)),
                                  "end_minus_start": paired(run_rank <= top, ranks <= top, articles)},
            "within_top_100": {"start": float(np.mean(ranks <= 100)), "end": float(np.mean(run_rank <= 100)),
                               "end_minus_start": paired(run_rank <= 100, ranks <= 100, articles)},
            "rank_rose": float(np.mean(run_rank < ranks)), "rank_fell": float(np.mean(run_rank > ranks)),
            "curve": run_curve(store.open(run["ref"]), args.curve_window)}
        log.info("%s: span-holding block within top %d: %.3f -> %.3f", name, top,
                 retrieval[name][f"within_top_{top}"]["start"], retrieval[name][f"within_top_{top}"]["end"])

    # the reader pretraining starts from: the masked-LM warm-up's, or pretrain.reader_encoder as
    # given where the warm-up is off (a copy-trained reader, say)
    start = "warm-up reader" if warm_reader else "starting reader"
    readers: dict[str, str] = {start: reader_mlm_dir(warm_reader.ref) if warm_reader else p.reader_encoder}
    for name, label in (("REALM", "REALM reader"), ("null only (BERT baseline)", "null-only reader")):
        if name in runs:
            readers[label] = str(Path(runs[name]["ref"].path) / "reader")

    measured: dict[str, Any] = {}
    correct: dict[str, np.ndarray] = {}
    holds = None
    models: dict[str, Any] = {}
    for name, source in readers.items():
        reader = KnowledgeAugmentedEncoder.from_pretrained(source).to(placement.device)
        models[name] = reader
        bar = LogProgress(log, every=60)
        bar.start(f"{name}: each recoverable example read with the null and the oracle block", len(scored), "examples")
        reading = read_oracle_and_null(reader, progress=bar.advance)
        bar.finish()
        # whether the oracle block holds the span as read depends on the input alone, not the reader
        if holds is not None and not np.array_equal(holds, reading.block_holds):
            raise SystemExit(f"error: {name}: the oracle blocks as read differ between readers")
        holds = reading.block_holds
        correct[name] = reading.block_correct
        measured[name] = {"null_block_accuracy": float(reading.null_correct.mean()),
                          "oracle_block_accuracy": float(reading.block_correct.mean()),
                          "oracle_minus_null": paired(reading.block_correct, reading.null_correct, articles)}

    # as pretraining scores them: the marginal over the frozen retriever's top-k and the null block
    marginal: dict[str, Any] = {}
    if args.eval_examples > 0:
        index = MipsIndex.build(vectors.shape[1])
        index.add(vectors, np.arange(len(blocks), dtype=np.int64))
        handle = IndexHandle(index, query_encoder.step)
        frozen = p.model_copy(update={"freeze_retriever": True})
        n = min(args.eval_examples, len(heldout))
        eval_articles = [e.doc_id for e in heldout[:n]]
        name = start  # the reader pretraining started from, scored as REALM reads: with retrieval, and alone
        rows: dict[str, list[dict[str, float]]] = {}
        for mode, idx in (("retrieval", handle), ("null block", None)):
            rows[mode] = []
            log.info("%s: %d held-out examples, %s", name, n, mode)
            m = RealmModels(models[name], query_encoder, doc_encoder)
            evaluate(m, data, idx, frozen, n, placement, per_example=rows[mode])
            models[name].eval()
        with_r = np.asarray([r["correct"] for r in rows["retrieval"]])
        alone = np.asarray([r["correct"] for r in rows["null block"]])
        found_r = np.asarray([r["answer_retrieved"] for r in rows["retrieval"]]) > 0.5
        marginal[name] = {"examples": n, "retrieval_accuracy": float(with_r.mean()),
                          "null_block_accuracy": float(alone.mean()),
                          "retrieval_minus_null": paired(with_r, alone, eval_articles),
                          "answer_retrieved": float(found_r.mean()),
                          "answer_retrieved_retrieval_accuracy": float(with_r[found_r].mean()) if found_r.any() else None,
                          "answer_retrieved_null_accuracy": float(alone[found_r].mean()) if found_r.any() else None}

    result: dict[str, Any] = {
        "question": "does the pretraining reader copy a span from a block that holds it, on real text?",
        "preset": args.preset, "config_file": args.config, "overrides": args.overrides,
        "machine": platform.machine(), "precision": placement.precision, "seconds": round(time.perf_counter() - t0, 1),
        "pretrain_steps": p.steps, "batch_size": p.batch_size, "freeze_retriever": p.freeze_retriever,
        "reader_length": p.reader_length, "top_k": p.top_k,
        "heldout_examples": len(heldout), "recoverable": len(scored),
        "oracle_holds_span_as_read": float(np.mean(holds)) if holds is not None else None,
        "oracle_rank": {"median": float(np.median(ranks)), f"within_top_{top}": float(np.mean(ranks <= top)),
                        "within_top_100": float(np.mean(ranks <= 100))},
        "holders_median": float(np.median(oracle.holders[found])),
        "readers": measured, "marginal": marginal, "retrieval": retrieval,
    }
    if "REALM reader" in correct and "null-only reader" in correct:
        result["realm_minus_null_reader_on_oracle"] = paired(correct["REALM reader"], correct["null-only reader"], articles)
    for name, m in measured.items():
        d = m["oracle_minus_null"]
        print(f"{name:22s} null block {m['null_block_accuracy']:.3f}  oracle block {m['oracle_block_accuracy']:.3f}  "
              f"oracle - null {d['delta']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]")
    for name, m in marginal.items():
        d = m["retrieval_minus_null"]
        print(f"{name:22s} retrieval {m['retrieval_accuracy']:.3f}  null block {m['null_block_accuracy']:.3f}  "
              f"diff {d['delta']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] on {m['examples']}")
    write_result(args.name, result)


if __name__ == "__main__":
    main()
