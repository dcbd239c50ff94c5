"""Does REALM's pretraining reader copy a span from a block that holds it, on real text?

Retrieval taken out of the question: for every recoverable held-out example of a pretraining run
(its masked span occurs, as whole words, in a block that is not a trivial retrieval), the oracle
block is the one of those blocks the warm-started retriever scores highest
(`realm_core/pretrain/reading.py`). Each reader predicts the span twice, reading the null block
alone and reading the oracle block alone:

- the masked-LM warm-up reader both runs start from,
- REALM's reader after pretraining (with its encoders frozen or not, as the config says),
- the null-only run's reader after the same steps.

Oracle minus null block, paired on the same examples with a 95% interval from resampling
articles, is what copying is worth to each reader; REALM's reader against the null-only reader
on the oracle block is what pretraining with retrieved blocks taught it. The oracle block's rank
under the retriever says how far retrieval is from bringing it (REALM reads the top
`pretrain.top_k - 1`).

The runs come from the artifact cache (`experiments/pretrain.py` with the same `--config` and
`--set` trains them); nothing trains here.

    .venv/bin/python experiments/realm_reading.py --config experiments/configs/realm_gain.yaml [--set s.f=v] [--name N]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peers import write_result  # noqa: E402

from realm_core.artifacts import ArtifactStore
from realm_core.cache import existing_artifacts_only
from realm_core.config import load_config, work_dir
from realm_core.graph import Resolver
from realm_core.pretrain.ablations import table2
from realm_core.pretrain.heldout import article_bootstrap
from realm_core.progress import LogProgress

log = logging.getLogger("experiments.realm_reading")


def paired(a: np.ndarray, b: np.ndarray, articles: list[str]) -> dict[str, Any]:
    """mean(a) - mean(b) on the same examples with its 95% interval over articles."""
    delta, lo, hi = article_bootstrap(a.astype(float), b.astype(float), articles)
    return {"delta": delta, "ci95": [lo, hi]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--root", default=None, help="artifact store (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--config", default=None, help="the YAML file the runs were trained with")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="stage.field=value, repeatable")
    ap.add_argument("--name", default="realm_reading", help="bench/results/<name>.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from realm_core.bert import load_tokenizer
    from realm_core.blocks import blocks_tokenizer
    from realm_core.distributed import Placement
    from realm_core.pretrain.batches import BlockTexts
    from realm_core.pretrain.heldout import (
        SpanLocator,
        continuation_ids,
        split_heldout,
        title_body_wordpieces,
    )
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.pretrain.reader_mlm import reader_mlm_dir
    from realm_core.pretrain.reading import oracle_blocks, read_blocks
    from realm_core.pretrain.stage import run_warm_reader
    from realm_core.retrieval.embed import embed_token_ids, load_embeddings
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.stage import run_embed_blocks
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
    from realm_core.spans.masking import iter_examples

    t0 = time.perf_counter()
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    cfg = load_config(args.preset, args.config, args.overrides)
    p = cfg.pretrain
    if p.warm_start == "none":
        raise SystemExit("error: the oracle block is the warm-started retriever's pick; pretrain.warm_start is none")
    rows = table2(cfg)
    names = list(rows)[:2]  # REALM, null only
    runs: dict[str, Any] = {}
    with existing_artifacts_only():  # read what experiments/pretrain.py trained; train nothing
        for name in names:
            variant = load_config(args.preset, args.config, [*args.overrides, *rows[name]])
            result = Resolver(variant, store).run("pretrain")
            assert result.ref is not None
            runs[name] = {"ref": result.ref, "stats": result.stats,
                          "heldout_rows": store.open(result.ref).read_table("pretrain_heldout").to_pylist()}
        resolver = Resolver(cfg, store)
        blocks_ref, spans_ref, warm_ref = resolver.ref("chunk"), resolver.ref("spans"), resolver.ref(p.warm_start)
        placement = Placement.from_env(p.device, p.precision)
        warm_reader = run_warm_reader(store, blocks_ref, p, placement)
        emb = run_embed_blocks(store, blocks_ref, cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(warm_ref)}))
    assert emb.ref is not None

    # the held-out examples exactly as the stage built and drew them (checked against its rows)
    blocks_art = store.open(blocks_ref, kind="blocks")
    spans_art = store.open(spans_ref, kind="salient_spans")
    encoder = blocks_tokenizer(blocks_art, {"chunk.encoder": cfg.chunk.encoder, "pretrain.reader_encoder": p.reader_encoder})
    tokenizer = load_tokenizer(p.reader_encoder)
    blocks = BlockTexts.from_table(blocks_art.read_table("blocks", ["block_id", "doc_id", "title", "text"]))
    examples = list(iter_examples(blocks_art, spans_art, cfg.masking, tokenizer, None, encoder))
    _, heldout = split_heldout(examples, p.heldout_every, p.eval_examples, p.seed)
    realm_rows, null_rows = runs["REALM"]["heldout_rows"], runs["null only (BERT baseline)"]["heldout_rows"]
    for name, run in runs.items():
        if [(r["doc_id"], r["block_id"]) for r in run["heldout_rows"]] != [(e.doc_id, e.block_id) for e in heldout]:
            raise SystemExit(f"error: {run['ref'].path}: {name} scored other held-out examples than the ones rebuilt here")
    keep = [i for i, r in enumerate(realm_rows) if r["recoverable"]]
    scored = [heldout[i] for i in keep]
    log.info("%d held-out examples, %d recoverable", len(heldout), len(scored))

    # the warm-started retriever's pick among the allowed blocks that hold each span
    vectors = load_embeddings(Path(emb.ref.path) / "embeddings", store.open(emb.ref).manifest["embeddings"],
                              len(blocks))  # (N, D) what REALM's first index holds
    query_encoder = RetrieverEncoder.from_pretrained(query_encoder_dir(warm_ref))
    queries = embed_token_ids(query_encoder, [e.input_ids for e in scored], tokenizer.pad_token_id, 64,
                              precision=placement.precision)  # (E, D)
    continuation = continuation_ids(tokenizer)
    locator = SpanLocator(title_body_wordpieces(blocks, tokenizer), continuation)
    oracle = oracle_blocks(scored, queries, vectors, locator, blocks, p.exclusion)
    found = np.flatnonzero(oracle.block >= 0)
    if len(found) != len(scored):
        log.warning("%d recoverable examples have no allowed holder here; they are left out", len(scored) - len(found))
    scored = [scored[i] for i in found]
    chosen, ranks = oracle.block[found], oracle.rank[found]
    articles = [e.doc_id for e in scored]

    readers = {"warm-up reader (before pretraining)": reader_mlm_dir(warm_reader.ref) if warm_reader else p.reader_encoder,
               "REALM reader": str(Path(runs["REALM"]["ref"].path) / "reader"),
               "null-only reader": str(Path(runs["null only (BERT baseline)"]["ref"].path) / "reader")}
    measured: dict[str, Any] = {}
    holds = None
    for name, source in readers.items():
        reader = KnowledgeAugmentedEncoder.from_pretrained(source)
        bar = LogProgress(log, every=60)
        bar.start(f"{name}: each example read with the null and the oracle block", len(scored), "examples")
        reading = read_blocks(reader, scored, chosen, blocks, tokenizer, p.reader_length, continuation,
                              compute=placement.compute, progress=bar.advance)
        bar.finish()
        holds = reading.block_holds
        measured[name] = {"null_block_accuracy": float(reading.null_correct.mean()),
                          "oracle_block_accuracy": float(reading.block_correct.mean()),
                          "oracle_minus_null": paired(reading.block_correct, reading.null_correct, articles),
                          "correct_oracle": reading.block_correct.tolist()}
    # what the runs themselves scored on these examples (their marginal over what REALM retrieved)
    index_of = {i: j for j, i in enumerate(keep)}
    picked = [keep[j] for j in found]
    assert all(index_of[i] == j for i, j in zip(picked, found, strict=True))
    realm_marginal = np.asarray([realm_rows[i]["correct"] for i in picked], dtype=bool)
    null_marginal = np.asarray([null_rows[i]["correct"] for i in picked], dtype=bool)
    realm_oracle = np.asarray(measured["REALM reader"].pop("correct_oracle"), dtype=bool)
    null_oracle = np.asarray(measured["null-only reader"].pop("correct_oracle"), dtype=bool)
    measured["warm-up reader (before pretraining)"].pop("correct_oracle")
    top = p.top_k - 1
    result = {
        "question": "does the pretraining reader copy a span from a block that holds it, on real text?",
        "preset": args.preset, "config_file": args.config, "overrides": args.overrides,
        "machine": platform.machine(), "seconds": round(time.perf_counter() - t0, 1),
        "steps": p.steps, "batch_size": p.batch_size, "freeze_retriever": p.freeze_retriever,
        "reader_length": p.reader_length, "top_k": p.top_k,
        "heldout_examples": len(heldout), "recoverable": len(keep), "scored": len(scored),
        "oracle_holds_span_as_read": float(np.mean(holds)) if holds is not None else None,
        "oracle_rank": {"median": float(np.median(ranks)), f"within_top_{top}": float(np.mean(ranks <= top)),
                        "within_top_100": float(np.mean(ranks <= 100))},
        "holders_median": float(np.median(oracle.holders[found])),
        "readers": measured,
        "runs_marginal": {"REALM": float(realm_marginal.mean()), "null only": float(null_marginal.mean()),
                          "REALM minus null only": paired(realm_marginal, null_marginal, articles)},
        "realm_minus_null_reader_on_oracle": paired(realm_oracle, null_oracle, articles),
    }
    for name, m in measured.items():
        d = m["oracle_minus_null"]
        print(f"{name:38s} null block {m['null_block_accuracy']:.3f}  oracle block {m['oracle_block_accuracy']:.3f}  "
              f"oracle - null {d['delta']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]")
    write_result(args.name, result)


if __name__ == "__main__":
    main()
