"""Query-side benchmark: `realm serve-qa` as a user runs it (a real uvicorn process on a loopback
port, over HTTP) on the demo artifacts, against the libraries it wraps called directly in this
process on the same blocks and vectors, in this one run:

- search latency p50/p99 at k=10, one request at a time: BM25 (peer: bm25s's `retrieve` on the
  same block texts, same tokenizer settings) and dense over the current index (peers: a torch
  matmul + topk over the index's own vectors, and the same with the query encoder's forward in
  front of it, which is the part of a dense search no index can skip);
- ask latency p50/p99 (the default system: retrieval, the span reader over top-5 blocks);
- throughput with 8 concurrent clients for 60 s each on dense search and on ask, counting errors;
- a screenshot of the page answering a question, when Debian's chromium is installed.

Queries are SQuAD-open dev questions (articles 30-34), the same list for service and peers.
Needs `make demo` first (its artifact root, or --root). Results: bench/results/serve.json.

    .venv/bin/python bench/serve.py [--root work/artifacts] [--queries 200] [--asks 60] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import RESULTS, write_result

from flows.qa_service import serving
from realm_core.config import load_config, resolve_data_path
from realm_core.graph.resolver import Resolver
from realm_core.query import QueryEngine
from realm_core.retrieval.versions import current_step
from realm_core.store.artifacts import ArtifactStore

CHROMIUM = "/usr/bin/chromium"


def dev_questions(cfg: Any, n: int) -> list[str]:
    source = next(s for s in cfg.questions.sources if s.dataset == "squad-open" and s.split == "dev")
    data = json.loads(Path(resolve_data_path(source.path)).read_text())["data"]
    lo, hi = source.articles
    out = [qa["question"] for article in data[lo:hi + 1] for p in article["paragraphs"] for qa in p["qas"]]
    return out[:n]


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "mean_ms": round(float(ms.mean()), 2), "n": len(seconds)}


def timed(fn: Any, items: list[Any]) -> list[float]:
    out = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        out.append(time.perf_counter() - t)
    return out


def get(client: Any, path: str, **params: Any) -> dict[str, Any]:
    r = client.get(path, params=params, timeout=120)
    if r.status_code != 200:
        raise RuntimeError(f"{path} {params}: HTTP {r.status_code} {r.text[:200]}")
    body: dict[str, Any] = r.json()
    return body


def concurrent(url: str, path: str, queries: list[str], clients: int, seconds: float, **params: Any) -> dict[str, Any]:
    """`clients` threads, each with its own connection, sending requests back to back for
    `seconds`; every non-200 or transport error is counted."""
    import httpx

    done = threading.Event()
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with httpx.Client(base_url=url) as c:
            j = i
            while not done.is_set():
                t = time.perf_counter()
                try:
                    r = c.get(path, params={"q": queries[j % len(queries)], **params}, timeout=300)
                    error = None if r.status_code == 200 else repr(r)[:200]
                except httpx.HTTPError as e:
                    error = repr(e)[:200]
                with lock:
                    if error is None:
                        latencies.append(time.perf_counter() - t)
                    else:
                        errors.append(error)
                j += clients

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    done.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {"clients": clients, "seconds": round(wall, 1), "requests": len(latencies), "errors": len(errors),
            "first_errors": errors[:3], "requests_per_s": round(len(latencies) / wall, 2),
            "latency": percentiles(latencies) if latencies else None}


def screenshot(url: str, question: str, out: Path) -> str | None:
    if not Path(CHROMIUM).exists():
        print(f"no screenshot: {CHROMIUM} not installed (apt-get install chromium)")
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(url)
        page.fill("#q", question)
        page.click("button[type=submit]")
        page.wait_for_selector("#highlight, #error", timeout=120_000)
        page.screenshot(path=str(out), full_page=False)
        browser.close()
    print(f"wrote {out.relative_to(ROOT)}")
    return str(out.relative_to(ROOT))


def peers(engine: QueryEngine, queries: list[str], k: int) -> dict[str, Any]:
    """bm25s and torch matmul + topk in this process, on the blocks and vectors the service uses."""
    import bm25s
    import Stemmer
    import torch

    from realm_core.retrieval.retrievers import embed_questions

    blocks = engine.blocks
    stemmer = Stemmer.Stemmer("english")
    corpus = bm25s.tokenize([f"{t} {b}" for t, b in zip(blocks.titles, blocks.texts, strict=True)],
                            stopwords="en", stemmer=stemmer, show_progress=False)
    bm25 = bm25s.BM25()
    bm25.index(corpus, show_progress=False)

    def bm25_one(q: str) -> None:
        tokens = bm25s.tokenize([q], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        bm25.retrieve(tokens, k=k, show_progress=False)

    current = engine.current_index()
    faiss_index = current.index.index
    vectors = torch.from_numpy(faiss_index.reconstruct_n(0, faiss_index.ntotal))  # (N, D), the index's own
    encoder, tokenizer, length = current.query_encoder, engine.tokenizer, current.question_length
    with torch.inference_mode():
        embedded = [embed_questions(encoder, tokenizer, [q], length) for q in queries]

        def matmul_topk(q: torch.Tensor) -> None:
            torch.topk(q @ vectors.T, k, dim=1)

        def encode_matmul_topk(q: str) -> None:
            torch.topk(embed_questions(encoder, tokenizer, [q], length) @ vectors.T, k, dim=1)

        for q in queries[:5]:
            bm25_one(q)
            encode_matmul_topk(q)
        return {"bm25s": percentiles(timed(bm25_one, queries)),
                "matmul_topk": percentiles(timed(matmul_topk, embedded)),
                "encode_matmul_topk": percentiles(timed(encode_matmul_topk, queries)),
                "vectors": list(vectors.shape)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(Path(os.environ.get("REALM_WORK_DIR", ROOT / "work")) / "artifacts"))
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--queries", type=int, default=200, help="search queries timed one at a time")
    parser.add_argument("--asks", type=int, default=60, help="questions asked one at a time")
    parser.add_argument("--seconds", type=float, default=60, help="each concurrent phase's length")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--page-question", default="Where did Super Bowl 50 take place?",
                        help="the question the screenshot shows")
    args = parser.parse_args()
    import httpx
    import torch

    (RESULTS.parent / ".work").mkdir(exist_ok=True)
    cfg = load_config(args.preset)
    engine = QueryEngine(Resolver(cfg, ArtifactStore(args.root)))
    if current_step(engine.stages.store) is None:
        raise SystemExit(f"{args.root}: no index built; run `make demo` first (or pass --root)")
    queries = dev_questions(cfg, args.queries)
    print(f"peers in this process: bm25s, torch matmul + topk over the current index ({len(queries)} queries)")
    peer = peers(engine, queries, args.k)
    del engine  # the service loads its own; this process stays idle while it is measured

    print("starting realm serve-qa ...")
    with open(RESULTS.parent / ".work" / "serve.log", "w") as log, \
            serving(["--preset", args.preset, "--root", args.root], log=log) as url:
        with httpx.Client(base_url=url) as c:
            health = get(c, "/healthz")
            t = time.perf_counter()
            get(c, "/search", q=queries[0], k=args.k, retriever="bm25")
            get(c, "/search", q=queries[0], k=args.k)
            first_ask = get(c, "/ask", q=queries[0])
            load_s = time.perf_counter() - t
            print(f"index version {health['index_version']}; models loaded on first use in {load_s:.1f} s; "
                  f"ask uses {first_ask['system_key']} ({first_ask['system_choice']})")
            search_bm25 = timed(lambda q: get(c, "/search", q=q, k=args.k, retriever="bm25"), queries)
            search_dense = timed(lambda q: get(c, "/search", q=q, k=args.k), queries)
            asks = timed(lambda q: get(c, "/ask", q=q), queries[:args.asks])
        print(f"{args.clients} concurrent clients, {args.seconds:.0f} s on dense search, then on ask ...")
        load_search = concurrent(url, "/search", queries, args.clients, args.seconds, k=args.k)
        load_ask = concurrent(url, "/ask", queries, args.clients, args.seconds)
        shot = screenshot(url, args.page_question, RESULTS / "serve_page.png")

    service_lat = {"bm25": percentiles(search_bm25), "dense": percentiles(search_dense), "ask": percentiles(asks)}
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "artifact_root": args.root, "preset": args.preset, "index_version": health["index_version"],
        "queries": len(queries), "asks": len(asks), "k": args.k, "ask_system": first_ask["system_key"],
        "first_use_load_s": round(load_s, 1),
        "service": service_lat, "peers": peer,
        "ratios": {"bm25_p50_vs_bm25s": round(service_lat["bm25"]["p50_ms"] / peer["bm25s"]["p50_ms"], 2),
                   "dense_p50_vs_matmul_topk": round(service_lat["dense"]["p50_ms"] / peer["matmul_topk"]["p50_ms"], 2),
                   "dense_p50_vs_encode_matmul_topk": round(
                       service_lat["dense"]["p50_ms"] / peer["encode_matmul_topk"]["p50_ms"], 2)},
        "concurrent": {"search_dense": load_search, "ask": load_ask},
        "targets": {"dense_p50_ms_max": 50, "ask_p50_ms_max": 1000,
                    "dense_p50_met": service_lat["dense"]["p50_ms"] <= 50,
                    "ask_p50_met": service_lat["ask"]["p50_ms"] <= 1000,
                    "zero_errors": load_search["errors"] == 0 and load_ask["errors"] == 0},
        "screenshot": shot, "page_question": args.page_question,
    }
    for name, lat in service_lat.items():
        print(f"service {name:5s} p50 {lat['p50_ms']:8.1f} ms  p99 {lat['p99_ms']:8.1f} ms")
    for name, lat in ((n, v) for n, v in peer.items() if isinstance(v, dict)):
        print(f"peer {name:18s} p50 {lat['p50_ms']:8.2f} ms  p99 {lat['p99_ms']:8.2f} ms")
    for name, load in result["concurrent"].items():
        print(f"{name}: {load['requests_per_s']} req/s with {load['clients']} clients, {load['errors']} errors")
    write_result("serve", result)


if __name__ == "__main__":
    main()
