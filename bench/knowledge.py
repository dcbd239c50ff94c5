"""The knowledge corpus, measured on the demo system (after `make demo`), in one run on a
hard-linked copy of its store (the demo's own store is left as it is):

- cost: `realm add` of one article, and of 10% more blocks (a SQuAD article and Wikipedia
  articles, two files in one command), against its peer, a full re-index of the knowledge corpus
  (`realm add --reembed`: every block embedded again by the same encoders), each the command a
  user types, timed from its start to its exit; then the same three in one warm process, a
  `realm serve-qa --allow-add` that takes them as POST /documents (the service's libraries
  imported and its query side loaded once, before the first): what a command's start-up costs
  each add is the difference;
- equality: the incremental version's index against the full re-index's, the same blocks searched
  by 1,000 SQuAD-open questions (flat index: the same top-10 ids, scores within float error);
- quality: two SQuAD test articles (38, 39) held out of the knowledge corpus (their questions
  never trained on: the span reader trains on articles 0-29), their questions asked by BM25 +
  reader before and after `realm add` puts them back, against the same questions asked of the
  same system with the articles in its corpus from the start (the demo's own corpus: paired, the
  issue's "same system's SQuAD-open test EM" on exactly these questions), and beside it the
  system's EM on the other test articles (35-37).

    .venv/bin/python bench/knowledge.py          # writes bench/results/knowledge.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import fail, write_result

from realm_core.config import load_config, work_dir
from realm_core.errors import MissingArtifactError
from realm_core.graph.resolver import Resolver
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap
from realm_core.store.artifacts import ArtifactStore

WORK = ROOT / "bench" / ".work" / "knowledge"
HELD_OUT = (38, 39)        # SQuAD test articles taken out of the corpus, then added back
SAME_SYSTEM = (35, 36, 37)  # the other test articles: the system's EM on what it always had
SYSTEM = "bm25"


def realm_command(args: list[str], root: Path) -> float:
    """Run `realm ARGS` on the scratch store; its wall seconds (exits non-zero: stop)."""
    t0 = time.perf_counter()
    r = subprocess.run([str(Path(sys.executable).parent / "realm"), *args, "--preset", "demo", "--root", str(root)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"realm {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def jsonl(path: Path, docs: list[dict[str, Any]]) -> Path:
    """Documents as `realm add` reads them: each native id (the doc id less its source prefix)."""
    path.write_text("".join(json.dumps({"id": d["doc_id"].split(":", 1)[1], "title": d["title"], "text": d["text"]})
                            + "\n" for d in docs))
    return path


def exact_match_of(engine: Any, questions: list[Any]) -> list[bool]:
    from realm_core.openqa.predict import answer_correct

    answers = engine.ask([q.question for q in questions], SYSTEM)
    return [answer_correct(a.answer, q) for a, q in zip(answers, questions, strict=True)]


def squad_questions(articles: tuple[int, ...]) -> list[Any]:
    from realm_core.config import resolve_data_path
    from realm_core.openqa.reading import QAQuestion
    from realm_core.questions import squad_questions as read

    path = resolve_data_path("data:squad/squad-v1.1-dev.articles-00-39.json")
    out = []
    for a in articles:
        out += [QAQuestion(q.qid, q.question, q.answers) for q in read(path, (a, a)).questions]
    return out


def served_adds(root: Path, one: list[dict[str, Any]], second: list[dict[str, Any]],
                wiki: list[dict[str, Any]]) -> dict[str, Any]:
    """The one article, then the 10% (the second article and the Wikipedia articles, one request),
    then the full re-index, as POST /documents to one `realm serve-qa --allow-add` on `root`:
    each request's wall seconds as its client sees them."""
    import httpx

    from flows.qa_service import serving

    def posted(docs: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
        return [{"id": d["doc_id"].split(":", 1)[1], "title": d["title"], "text": d["text"], "source": source}
                for d in docs]

    seconds, answers = [], []
    with serving(["--allow-add", "--preset", "demo", "--root", str(root)], timeout=600) as url:
        for body in ({"documents": posted(one, "squad")},
                     {"documents": posted(second, "squad") + posted(wiki, "enwiki")},
                     {"reembed": True}):
            t0 = time.perf_counter()
            r = httpx.post(f"{url}/documents", json=body, timeout=3600)
            seconds.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise SystemExit(f"POST /documents: {r.status_code}: {r.text[-2000:]}")
            answers.append(r.json())
    return {"add_one_article_s": round(seconds[0], 1), "add_ten_percent_s": round(seconds[1], 1),
            "ten_percent_blocks": answers[1]["counts"]["blocks_added"], "full_reindex_s": round(seconds[2], 1),
            "ten_percent_over_full": round(seconds[1] / seconds[2], 3)}


def search_equality(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray],
                    q: np.ndarray) -> dict[str, Any]:
    """Top-10 of the same query vectors `q` over two sets of (block vectors, block ids), flat and
    exact: equal where every query gets the same ids and every score agrees within 1e-3."""
    from realm_core.retrieval.index import MipsIndex

    results = []
    for vectors, ids in (first, second):
        index = MipsIndex.build(q.shape[1], "Flat")
        index.add(vectors, ids)
        results.append(index.search(q, 10))
    (s1, i1), (s2, i2) = results
    same = np.all(i1 == i2, axis=1)  # (Q,)
    diff = float(np.max(np.abs(s1 - s2)))
    return {"equal": bool(same.all() and diff <= 1e-3), "queries": len(q),
            "ids_identical_fraction": float(same.mean()), "max_score_difference": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="the demo's artifact store (default $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--name", default="knowledge", help="the result file, bench/results/NAME.json (a machine of "
                    "another kind keeps its own: knowledge_bf16)")
    args = ap.parse_args()
    from realm_core.knowledge.add import add_documents, tracked_encoders
    from realm_core.knowledge.versions import KnowledgeCorpus
    from realm_core.query import QueryEngine
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.versions import encoder_dir, load_index

    cfg = load_config("demo")
    source = Path(args.root or work_dir() / "artifacts")
    try:
        QueryEngine(Resolver(cfg, ArtifactStore(str(source)))).stages.run(f"finetune_{SYSTEM}")
    except MissingArtifactError as e:
        fail(f"{source}: the demo's BM25 + reader is not there; run `make demo` first ({e})")
    t_run = time.perf_counter()
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    root = WORK / "art"
    subprocess.run(["cp", "-al", str(source), str(root)], check=True)  # hard links: no copy of the bytes
    shutil.rmtree(root / "knowledge", ignore_errors=True)
    resolver = Resolver(cfg, ArtifactStore(str(root)))
    docs = resolver.store.open(resolver.ref("ingest"), kind="documents").read_table(
        "documents", ["doc_id", "title", "text", "source"]).to_pylist()
    by_id = {d["doc_id"]: d for d in docs}
    data = json.loads(Path(os.environ.get("REALM_DATA_DIR", ROOT.parent / "shared" / "data"),
                           "squad/squad-v1.1-dev.articles-00-39.json").read_text())["data"]
    held = [by_id["squad:" + data[a]["title"].replace(" ", "_")] for a in HELD_OUT]
    blocks = resolver.store.open(resolver.ref("chunk"), kind="blocks").read_table("blocks", ["doc_id"])
    per_doc: dict[str, int] = {}
    for d in blocks.column("doc_id").to_pylist():
        per_doc[d] = per_doc.get(d, 0) + 1
    target = blocks.num_rows // 10 - per_doc[held[1]["doc_id"]]  # the second article and Wikipedia articles
    wiki, n = [], 0
    for d in docs:
        if d["source"] == "enwiki" and n < target:
            wiki.append(d)
            n += per_doc.get(d["doc_id"], 0)
    held_questions, other_questions = squad_questions(HELD_OUT), squad_questions(SAME_SYSTEM)
    # the paired peer: the same questions, the articles in the corpus from the start (the demo's)
    always = exact_match_of(QueryEngine(Resolver(cfg, ArtifactStore(str(root)))), held_questions)
    # the starting point: the corpus without them (version 1 the pretraining corpus, version 2 without)
    add_documents(resolver, remove_docs=[d["doc_id"] for d in [*held, *wiki]])
    engine = QueryEngine(Resolver(cfg, ArtifactStore(str(root))))
    before = exact_match_of(engine, held_questions)
    # one article, then 10% more blocks, then the full re-index: each the command a user types
    one = realm_command(["add", str(jsonl(WORK / "one.jsonl", held[:1])), "--name", "squad"], root)
    ten = [jsonl(WORK / "second.jsonl", held[1:]), jsonl(WORK / "wikipedia.jsonl", wiki)]
    corpus = KnowledgeCorpus.of_store(ArtifactStore(str(root)))
    before_ten = corpus.current()
    t0 = time.perf_counter()
    # both files in one command, each with its source name: one process start, one encoder load
    realm_command(["add", str(ten[0]), str(ten[1]), "--name", "squad", "--name", "enwiki"], root)
    ten_s = time.perf_counter() - t0
    incremental = corpus.current()
    assert before_ten is not None and incremental is not None
    added_blocks = len(incremental.block_ids) - len(before_ten.block_ids)
    full_s = realm_command(["add", "--reembed"], root)
    full = corpus.current()
    assert full is not None
    # the same three in one warm process, from the same starting corpus
    add_documents(resolver, remove_docs=[d["doc_id"] for d in [*held, *wiki]])
    service = served_adds(root, held[:1], held[1:], wiki)
    after = exact_match_of(QueryEngine(Resolver(cfg, ArtifactStore(str(root)))), held_questions)
    delta, lo, hi = paired_bootstrap(after, always)
    same_system = exact_match_of(QueryEngine(Resolver(cfg, ArtifactStore(str(root)))), other_questions)
    # equality on the index's encoder, searched by its own query encoder
    from realm_core.bert import load_tokenizer
    from realm_core.distributed import resolve_device, resolve_precision
    from realm_core.knowledge.add import block_embedder
    from realm_core.retrieval.embed import embed_queries
    from realm_core.retrieval.stage import encoder_hash

    _, art = load_index(resolver.store)
    doc = encoder_dir(resolver.store, art)
    configs = tracked_encoders(resolver)
    index_hash = encoder_hash(doc)  # by content: a system may name the same encoder by another path
    assert index_hash in configs and index_hash in full.encoders, "the index's encoder is not tracked"
    query_dir = str(Path(doc).parent / "query_encoder") if doc.endswith("doc_encoder") else doc
    queries = [q.question for q in squad_questions(tuple(range(30, 40)))][:1000]
    q = embed_queries(RetrieverEncoder.from_pretrained(query_dir).eval(), load_tokenizer(query_dir), queries, 32, 64)
    full_vectors = full.vectors(index_hash)
    equality = search_equality((incremental.vectors(index_hash), incremental.block_ids),
                               (full_vectors, full.block_ids), q)
    # the floor: the full re-index against the same blocks embedded again in other batches
    embed = block_embedder(configs[index_hash])
    t = full.table
    titles, texts = t.column("title").to_pylist(), t.column("text").to_pylist()
    again = np.zeros_like(full_vectors)
    for half in (slice(0, None, 2), slice(1, None, 2)):  # alternate blocks: other batches, other padding
        again[half] = embed(titles[half], texts[half])
    equality["precision"] = resolve_precision(resolve_device(configs[index_hash].device),
                                              configs[index_hash].precision)
    equality["rebuild_against_rebuild"] = search_equality((again, full.block_ids), (full_vectors, full.block_ids), q)
    result = {
        "machine": platform.machine(), "cpu": __import__("flows.demo", fromlist=["x"]).cpu_description(),
        "corpus_blocks": int(blocks.num_rows), "encoders": len(full.encoders),
        "add_one_article_s": round(one, 1), "one_article_blocks": per_doc[held[0]["doc_id"]],
        "add_ten_percent_s": round(ten_s, 1), "ten_percent_blocks": added_blocks,
        "full_reindex_s": round(full_s, 1), "ten_percent_over_full": round(ten_s / full_s, 3),
        "service": service,
        "incremental_equals_full": equality,
        "added_articles": {
            "articles": [data[a]["title"] for a in HELD_OUT], "questions": len(held_questions), "system": SYSTEM,
            "em_before": float(np.mean(before)), "em_after": float(np.mean(after)),
            # the same questions, the articles in the corpus from the start: paired
            "test_em_same_system": float(np.mean(always)),
            "em_after_minus_test": delta, "em_after_minus_test_ci95": [lo, hi],
            "em_after_minus_test_mcnemar_p": mcnemar_p(after, always),
            "answers_changed": int(sum(a != b for a, b in zip(after, always, strict=True))),
            # the system on the other test articles, always in its corpus (a different sample)
            "other_test_em": float(np.mean(same_system)), "other_test_questions": len(other_questions),
            "other_test_articles": [data[a]["title"] for a in SAME_SYSTEM]},
        "wall_seconds": round(time.perf_counter() - t_run, 1)}
    write_result(args.name, result)
    print(json.dumps({k: v for k, v in result.items() if k != "cpu"}, indent=2))


if __name__ == "__main__":
    main()
