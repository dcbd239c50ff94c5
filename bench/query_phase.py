"""ORQA's early update (`finetune.query_phase`) measured on SQuAD-open dev: a dense system's
query encoder before and after the phase, recall@1/5/20 on every dev question (articles 30-34),
paired per question with a 95% bootstrap interval, and the phase's wall time. The peer is the
same query encoder before the phase, on the same questions against the same frozen block
embeddings, in the same run.

Checkpoints are chosen on the first `finetune.dev_questions` dev questions (the phase's own
selection); the recall reported is on all of them, so the figure leans a little optimistic on
those questions; the open-QA table's test split is the clean measure.

    .venv/bin/python bench/query_phase.py [--system ict] [--set finetune.query_phase.steps=440] [--name query_phase_dev]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers import write_result  # noqa: E402

from realm_core.artifacts import ArtifactStore
from realm_core.bert import load_tokenizer
from realm_core.config import load_config, work_dir
from realm_core.graph import Resolver, qa_system, stage
from realm_core.openqa.finetune_stage import _blocks, _retriever, load_questions
from realm_core.openqa.query_tuning import answer_ranks, train_query_encoder
from realm_core.openqa.retrievers import Dense
from realm_core.openqa.significance import paired_bootstrap
from realm_core.progress import LogProgress
from realm_core.retrieval.encoders import RetrieverEncoder

log = logging.getLogger("bench.query_phase")
KS = (1, 5, 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="stage.field=value, repeatable")
    ap.add_argument("--system", default="ict", help="a dense system: ict, realm, ...")
    ap.add_argument("--name", default="query_phase_dev", help="bench/results/<name>.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    cfg = load_config(args.preset, args.config, args.overrides)
    c = cfg.finetune
    if c.query_phase.steps == 0:
        raise SystemExit("finetune.query_phase.steps is 0 in this config: set it with --set")
    store = ArtifactStore(work_dir() / "artifacts")
    resolver = Resolver(cfg, store, progress=lambda: LogProgress(log, every=60))
    refs = {u: resolver.run(u).ref for u in stage(f"finetune_{args.system}").upstream(cfg)}  # what the system needs
    system = qa_system(cfg, refs, args.system)
    if system.query_encoder is None:
        raise SystemExit(f"{args.system} is not a dense system")
    tokenizer = load_tokenizer(system.reader)
    blocks = _blocks(store, resolver.ref("chunk"), tokenizer)
    train = load_questions(store, resolver.ref("questions"), c.dataset, c.split)
    dev = load_questions(store, resolver.ref("questions"), c.dataset, c.dev_split)
    query_encoder = RetrieverEncoder.from_pretrained(system.query_encoder, dropout=c.dropout).eval()
    retriever = _retriever(store, resolver.ref("chunk"), system, blocks, query_encoder, tokenizer, c)
    assert isinstance(retriever, Dense)  # a system with a query encoder retrieves by its vectors
    before = answer_ranks(retriever, dev, blocks, max(KS))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        curves = train_query_encoder(retriever, train, blocks, c.query_phase, c.weight_decay, c.max_grad_norm,
                                     Path(tmp), dev[:c.dev_questions], resolver.progress())
    wall = time.perf_counter() - t0
    after = answer_ranks(retriever, dev, blocks, max(KS))
    recall = {}
    for k in KS:
        a = [r is not None and r <= k for r in after]
        b = [r is not None and r <= k for r in before]
        delta, lo, hi = paired_bootstrap(a, b)
        recall[f"R@{k}"] = {"before": sum(b) / len(b), "after": sum(a) / len(a), "delta": delta, "ci95": [lo, hi]}
        log.info("R@%d %.3f -> %.3f (%+.3f [%+.3f, %+.3f])", k, sum(b) / len(b), sum(a) / len(a), delta, lo, hi)
    write_result(args.name, {
        "preset": args.preset, "system": system.name, "overrides": args.overrides,
        "query_phase": c.query_phase.model_dump(mode="json"), "dev_questions": len(dev),
        "train_questions": len(train), "wall_seconds": round(wall, 1),
        "phase": curves.stats(len(train), c.query_phase), "recall": recall,
        "curve": [{k: r[k] for k in ("step", "loss", "dev_recall")} for r in curves.steps if r["dev_recall"] is not None],
    })


if __name__ == "__main__":
    main()
