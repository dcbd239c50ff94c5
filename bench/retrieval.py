"""Retrieval table: BM25, the untrained projection, the ICT warm-started retriever and the
off-the-shelf all-MiniLM reference, measured in one run on the same blocks (SQuAD-open articles
30-39 against every demo block; the DPR NQ sample against its passages). Then approximate search
on the real ICT block embeddings: recall@10 of IVF and HNSW against exact search.

Stages run through the artifact cache of the work dir, so after `make demo` only the evaluation
and the two reference embeddings are computed (about 6 minutes on 2 cores; from nothing, 15).

    .venv/bin/python bench/retrieval.py [--preset demo] [--root work/artifacts]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

from realm_core.config import load_config, work_dir
from realm_core.graph.resolver import Resolver
from realm_core.progress import NoProgress
from realm_core.retrieval.embed import load_embeddings
from realm_core.retrieval.evaluation import run_evaluate_retrieval, standard_systems
from realm_core.retrieval.index import MipsIndex
from realm_core.store.artifacts import ArtifactStore


def ann_recall(vectors: np.ndarray, queries: np.ndarray, factories: list[str], k: int = 10) -> list[dict[str, Any]]:
    """recall@k of each faiss factory against exact inner-product search, same vectors."""
    ids = np.arange(len(vectors), dtype=np.int64)
    exact = MipsIndex.build(vectors.shape[1], "Flat")
    exact.add(vectors, ids)
    _, truth = exact.search(queries, k)
    out = []
    for factory in factories:
        t0 = time.perf_counter()
        index = MipsIndex.build(vectors.shape[1], factory, train_vectors=vectors if "IVF" in factory else None,
                                ivf_nprobe=8, hnsw_ef_search=64)
        index.add(vectors, ids)
        build = time.perf_counter() - t0
        _, found = index.search(queries, k)
        recall = np.mean([len(set(f) & set(t)) / k for f, t in zip(found, truth, strict=True)])
        out.append({"factory": factory, "recall_at_10": float(recall), "build_s": build})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--root", default=None, help="artifact root (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="stage.field=value over the preset, repeatable (e.g. ict.steps=150)")
    args = ap.parse_args()
    # README's table has the reference rows
    cfg = load_config(args.preset, overrides=[*args.overrides, "retrieval_eval.reference_rows=true"])
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    t0 = time.perf_counter()
    stages = Resolver(cfg, store)
    blocks, ict = stages.run("chunk"), stages.run("ict")
    systems = standard_systems(ict.ref, cfg.embed, cfg.ict.encoder, cfg.ict.projection_dim, cfg.ict.seed)
    result = run_evaluate_retrieval(store, stages.ref("chunk"), systems, cfg.retrieval_eval, NoProgress())
    manifest = store.open(result.ref).manifest
    print(result.report)

    # approximate search on the real ICT block embeddings (uniform random vectors say nothing)
    art = store.open(stages.ref("embed"))  # the pipeline's: the ICT document encoder
    vectors = load_embeddings(Path(art.path) / "embeddings", art.manifest["embeddings"], blocks.stats["blocks"])
    rng = np.random.default_rng(0)
    queries = vectors[rng.choice(len(vectors), min(1000, len(vectors)), replace=False)]
    nlist = max(4, int(np.sqrt(len(vectors))))
    ann = ann_recall(vectors, queries, [f"IVF{nlist},Flat", "HNSW32"])
    for a in ann:
        print(f"{a['factory']}: recall@10 {a['recall_at_10']:.3f} on {len(vectors):,} ICT block embeddings")

    result_json = {
        "preset": args.preset, "machine": platform.machine(), "seconds": round(time.perf_counter() - t0, 1),
        "ict": ict.stats, "ict_config": cfg.ict.model_dump(mode="json"),
        "results": manifest["results"], "systems": manifest["systems"],
        "ann": {"blocks": len(vectors), "queries": len(queries), "ivf_nprobe": 8, "hnsw_ef_search": 64,
                "indexes": ann},
    }
    write_result("retrieval", result_json)


if __name__ == "__main__":
    main()
