"""int8 dynamic quantization for the inference-only passes, against fp32 in the same run, on the
demo system (after `make demo`), its store only read:

- block embedding: every block of the demo corpus embedded by the index's document encoder in
  fp32, then in int8 (`embed.precision: int8`): blocks per second; then the SQuAD-open questions
  (articles 30-39) searched over each set of vectors by the index's query encoder in the same
  precision (flat, exact): recall@5 and @20, the paired difference with its 95% bootstrap
  interval over questions;
- reading: BM25 + the demo's fine-tuned reader (`realm ask`'s engine) answers the SQuAD-open test
  questions (articles 35-39) with `query.precision` fp32, then int8: questions per second (the
  models loaded first, by one question), EM, the paired difference with its interval and
  McNemar's p.

int8 is within noise for a pass where the paired interval holds 0. `--isa avx2` runs the same
with every library's kernels held to AVX2 (AVX2_ONLY: ATen, MKL, oneDNN and FBGEMM each read
their variable), the nearest this benchmark gets to an AVX2-only laptop on a CPU that has more:
the same instructions, not the same memory or clock.

    .venv/bin/python bench/quantize.py              # writes bench/results/quantization.json
    .venv/bin/python bench/quantize.py --isa avx2   # writes bench/results/quantization_avx2.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import fail, write_result

from realm_core.config import load_config, resolve_data_path, work_dir
from realm_core.distributed import Precision
from realm_core.errors import MissingArtifactError, RealmError
from realm_core.graph.resolver import Resolver
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap
from realm_core.store.artifacts import ArtifactStore

PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
SYSTEM = "bm25"
TEST_ARTICLES = (35, 39)
KS = (5, 20)
# each library's own switch holding its kernels to AVX2
AVX2_ONLY = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


INT8_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")  # what int8 kernels can use


def paired(a: list[bool], b: list[bool]) -> dict[str, Any]:
    delta, lo, hi = paired_bootstrap(a, b)
    return {"delta": delta, "ci95": [lo, hi], "mcnemar_p": mcnemar_p(a, b), "within_noise": lo <= 0.0 <= hi,
            "changed": int(sum(x != y for x, y in zip(a, b, strict=True)))}


def embedding(resolver: Resolver) -> dict[str, Any]:
    """Every block embedded in each precision, then SQuAD-open searched over each (flat)."""
    import torch

    from realm_core.answers import token_string
    from realm_core.bert import load_tokenizer
    from realm_core.distributed import Placement
    from realm_core.questions import squad_questions
    from realm_core.retrieval.embed import embed_queries, embed_texts
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.evaluation import first_hits
    from realm_core.retrieval.index import MipsIndex
    from realm_core.retrieval.versions import encoder_dir, load_index

    cfg, store = resolver.cfg, resolver.store
    _, art = load_index(store)
    doc = encoder_dir(store, art)
    query = str(Path(doc).parent / "query_encoder") if doc.endswith("doc_encoder") else doc
    table = store.open(resolver.ref("chunk"), kind="blocks").read_table("blocks", ["title", "text"])
    titles, texts = table.column("title").to_pylist(), table.column("text").to_pylist()
    e, r = cfg.embed, cfg.retrieval_eval
    questions = squad_questions(resolve_data_path(r.squad_path), r.squad_articles).questions
    tokenizer = load_tokenizer(doc)
    tokens: dict[int, str] = {}

    def block_tokens(block: int) -> str:
        if block not in tokens:
            tokens[block] = token_string(texts[block])
        return tokens[block]

    out: dict[str, Any] = {"blocks": len(texts), "block_length": e.max_length, "questions": len(questions),
                           "precisions": {}}
    hits: dict[str, np.ndarray] = {}
    for p in PRECISIONS:
        encoder = RetrieverEncoder.from_pretrained(doc, e.projection_dim, e.pooling, e.seed, e.normalize)
        t0 = time.perf_counter()
        vectors = embed_texts(encoder, tokenizer, titles, texts, e.max_length, e.batch_size, precision=p)
        seconds = time.perf_counter() - t0
        query_encoder = RetrieverEncoder.from_pretrained(query, e.projection_dim, e.pooling, e.seed, e.normalize)
        q = embed_queries(Placement(torch.device("cpu"), p).for_inference(query_encoder), load_tokenizer(query),
                          [x.question for x in questions], r.query_length, 64)
        index = MipsIndex.build(vectors.shape[1], "Flat")
        index.add(vectors, np.arange(len(texts), dtype=np.int64))
        _, ranked = index.search(q, max(KS))
        hits[p] = first_hits(ranked, [x.answers for x in questions], block_tokens)
        out["precisions"][p] = {"seconds": round(seconds, 1), "blocks_per_s": round(len(texts) / seconds, 2),
                                **{f"R@{k}": float(np.mean((hits[p] > 0) & (hits[p] <= k))) for k in KS}}
        print(f"embedding {p}: {seconds:.1f} s, R@5 {out['precisions'][p]['R@5']:.3f}", flush=True)
    fp32, int8 = out["precisions"]["fp32"], out["precisions"]["int8"]
    out["speedup"] = round(fp32["seconds"] / int8["seconds"], 2)
    out["paired"] = {f"R@{k}": paired([bool(0 < h <= k) for h in hits["int8"]],
                                      [bool(0 < h <= k) for h in hits["fp32"]]) for k in KS}
    return out


def reading(cfg: Any, root: str, system_dir: str | None) -> dict[str, Any]:
    """BM25 + reader on SQuAD-open test through the query side, in each precision: the demo
    store's system, or the exported one in `system_dir` (`realm export`)."""
    from realm_core.openqa.predict import answer_correct
    from realm_core.openqa.reading import QAQuestion
    from realm_core.query import Answerer, QueryEngine
    from realm_core.questions import squad_questions
    from realm_core.system_bundle import BundleEngine

    r = cfg.retrieval_eval
    questions = [QAQuestion(x.qid, x.question, x.answers)
                 for x in squad_questions(resolve_data_path(r.squad_path), TEST_ARTICLES).questions]
    out: dict[str, Any] = {"system": SYSTEM, "questions": len(questions), "top_k": cfg.finetune.top_k,
                           "precisions": {}, "from": "exported system" if system_dir else "artifact store"}
    correct: dict[str, list[bool]] = {}
    for p in PRECISIONS:
        query = cfg.query.model_copy(update={"precision": p})
        engine: Answerer = (BundleEngine(system_dir, query) if system_dir else
                            QueryEngine(Resolver(cfg.model_copy(update={"query": query}), ArtifactStore(root))))
        engine.ask([questions[0].question], SYSTEM)  # the reader, BM25 and the blocks loaded
        t0 = time.perf_counter()
        answers = engine.ask([x.question for x in questions], SYSTEM)
        seconds = time.perf_counter() - t0
        correct[p] = [answer_correct(a.answer, x) for a, x in zip(answers, questions, strict=True)]
        out["precisions"][p] = {"seconds": round(seconds, 1), "questions_per_s": round(len(questions) / seconds, 2),
                                "EM": float(np.mean(correct[p]))}
        print(f"reading {p}: {seconds:.1f} s, EM {out['precisions'][p]['EM']:.3f}", flush=True)
    out["speedup"] = round(out["precisions"]["fp32"]["seconds"] / out["precisions"]["int8"]["seconds"], 2)
    out["paired"] = {"EM": paired(correct["int8"], correct["fp32"])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="the demo's artifact store (default $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--system-dir", default=None,
                    help="read with this exported BM25 system (`realm export DIR --system bm25`) instead of the "
                         "store's: the same reader and corpus, loaded as `realm serve-qa --system-dir` loads them")
    ap.add_argument("--isa", choices=("native", "avx2"), default="native",
                    help="avx2: every library's kernels held to AVX2 (set before torch loads: the script "
                         "starts itself again with them)")
    args = ap.parse_args()
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ONLY.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_ONLY})
    import torch

    from flows.demo import cpu_description
    from realm_core.query import QueryEngine
    from realm_core.retrieval.versions import load_index

    cfg = load_config("demo")
    root = str(args.root or work_dir() / "artifacts")
    resolver = Resolver(cfg, ArtifactStore(root))
    try:
        if args.system_dir is None:
            QueryEngine(resolver).stages.run(f"finetune_{SYSTEM}")
        load_index(resolver.store)
    except (MissingArtifactError, RealmError) as e:
        fail(f"{root}: the demo's index and BM25 + reader are not there; run `make demo` first ({e})")
    t0 = time.perf_counter()
    result = {"cpu": cpu_description(INT8_FLAGS), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "quantized_engine": torch.backends.quantized.engine, "isa": args.isa,
              "aten_capability": torch.backends.cpu.get_cpu_capability(),
              "isa_environment": {k: os.environ[k] for k in AVX2_ONLY if k in os.environ},
              "embedding": embedding(resolver), "reading": reading(cfg, root, args.system_dir)}
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    write_result("quantization" if args.isa == "native" else f"quantization_{args.isa}", result)
    print(json.dumps({k: v for k, v in result.items() if k != "cpu"}, indent=2))


if __name__ == "__main__":
    main()
