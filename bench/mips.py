"""MIPS benchmark: realm's faiss index against the Hugging Face REALM port's brute force
(`torch.matmul` of queries with every block embedding, then `topk`), same vectors, same run.

Vectors are clustered, not uniform: ANN recall on uniform random vectors says nothing (every
neighbour is nearly as far as every other). N normalised 128-d points around 2,000 centres,
queries drawn from the same mixture, never from the corpus. Recall@10 is measured against the
exact top-10. QPS: 1,000 queries in batches of --batch (default 1,000: a few REALM
steps' worth; faiss's flat scan pays a fixed cost per call, so small batches favour torch); best of 3. Build time and index memory too.

    .venv/bin/python bench/mips.py [--sizes 100000 1000000] [--threads 2] [--batch 1000]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

from realm_core.retrieval.index import MipsIndex

DIM, K, QUERIES = 128, 10, 1000


def clustered(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    assign = rng.integers(0, len(centres), size=n)
    x = centres[assign] + 0.35 * rng.standard_normal((n, DIM), dtype=np.float32)
    unit: np.ndarray = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return unit


def best_of(fn: object, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


BATCH = 1000


def torch_topk(corpus: object, queries: np.ndarray) -> np.ndarray:
    import torch

    out = []
    for i in range(0, len(queries), BATCH):
        q = torch.from_numpy(queries[i:i + BATCH])
        scores = torch.matmul(q, corpus.T)  # type: ignore[attr-defined]  # (B, N)
        out.append(torch.topk(scores, K, dim=1).indices.numpy())
    return np.concatenate(out)


def faiss_search(index: MipsIndex, queries: np.ndarray) -> np.ndarray:
    return np.concatenate([index.search(queries[i:i + BATCH], K)[1]
                           for i in range(0, len(queries), BATCH)])


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / K for f, e in zip(found, exact, strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1000, help="queries per search call")
    args = ap.parse_args()
    global BATCH
    BATCH = args.batch
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((2000, DIM), dtype=np.float32)
    queries = clustered(QUERIES, rng, centres)
    rows = []
    for n in args.sizes:
        corpus = clustered(n, rng, centres)
        ids = np.arange(n, dtype=np.int64)
        corpus_t = torch.from_numpy(corpus)
        exact = torch_topk(corpus_t, queries)
        t_torch = best_of(lambda c=corpus_t: torch_topk(c, queries))
        row = {"n": n, "peer": {"name": "torch matmul + topk (HF REALM)", "qps": round(QUERIES / t_torch, 1),
                                "recall_at_10": 1.0, "memory_mb": round(corpus.nbytes / 2**20, 1)},
               "indexes": []}
        nlist = int(4 * np.sqrt(n))
        for factory, kwargs in (("Flat", {}),
                                (f"IVF{nlist},Flat", {"ivf_nprobe": 16}),
                                ("HNSW32", {"hnsw_ef_search": 64})):
            t0 = time.perf_counter()
            train = corpus[rng.choice(n, size=min(n, 40 * nlist), replace=False)] if "IVF" in factory else None
            index = MipsIndex.build(DIM, factory, train_vectors=train, **kwargs)
            index.add(corpus, ids)
            build = time.perf_counter() - t0
            found = faiss_search(index, queries)
            t = best_of(lambda index=index: faiss_search(index, queries))
            mem = len(faiss.serialize_index(index.index)) / 2**20
            entry = {"factory": factory, **kwargs, "qps": round(QUERIES / t, 1),
                     "speedup_vs_peer": round(t_torch / t, 2), "recall_at_10": round(recall(found, exact), 4),
                     "build_s": round(build, 2), "memory_mb": round(mem, 1)}
            row["indexes"].append(entry)
            print(f"n={n:>9,} {factory:<14} {entry['qps']:>9.1f} qps  {entry['speedup_vs_peer']:>6.2f}x  "
                  f"recall@10 {entry['recall_at_10']:.4f}  build {entry['build_s']:.1f}s  {entry['memory_mb']:.0f} MB",
                  flush=True)
        print(f"n={n:>9,} {'torch (peer)':<14} {row['peer']['qps']:>9.1f} qps   1.00x  recall@10 1.0000", flush=True)
        rows.append(row)
    write_result("mips", {"benchmark": "mips", "dim": DIM, "k": K, "queries": QUERIES,
                          "batch": args.batch, "threads": args.threads, "data": "2,000-centre Gaussian mixture, normalised",
                          "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                          "runs": rows})


if __name__ == "__main__":
    main()
