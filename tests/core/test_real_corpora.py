"""Ingestion and chunking on the real files of ../shared/data (skipped, with the reason, without it)."""

import re
from collections import Counter
from pathlib import Path

from realm_core.bert import load_tokenizer
from realm_core.blocks import run_chunk
from realm_core.config import ChunkConfig, IngestConfig, load_config
from realm_core.ingest.corpora import read_dpr_json, read_squad
from realm_core.ingest.stage import clean_pages, run_ingest
from realm_core.ingest.wikipedia import iter_pages
from realm_core.sources import load_registry
from realm_core.store.artifacts import ArtifactStore, sha256_file
from tests.conftest import DPR, GENSIM, SQUAD, TABLES, W2V


def test_gensim_slice_counts(shared_data: Path) -> None:
    pages = list(iter_pages(shared_data / GENSIM))
    kinds = Counter(p.kind for p in pages)
    ns0 = [p for p in pages if p.namespace == 0]
    assert len(pages) == 206 and len(ns0) == 205
    assert kinds == Counter({"redirect": 99, "article": 98, "disambiguation": 8, "other_namespace": 1})
    disamb = {p.title for p in pages if p.kind == "disambiguation"}
    assert {"Alien", "Aa River", "Austin (disambiguation)"} <= disamb
    cleaned = clean_pages([p for p in pages if p.kind == "article"], "enwiki", GENSIM)
    assert all(kind == "article" and doc and len(doc["text"]) > 200 for kind, doc in cleaned)


def test_wikipedia2vec_sample_counts(shared_data: Path) -> None:
    kinds = Counter(p.kind for p in iter_pages(shared_data / W2V))
    assert kinds == Counter({"redirect": 1, "article": 2})


def test_table_markup_is_gone(shared_data: Path) -> None:
    pages = list(iter_pages(shared_data / TABLES))
    assert len(pages) == 5
    for kind, doc in clean_pages(pages, "enwiki", TABLES):
        assert kind == "article" and doc is not None
        for junk in ("{|", "|}", "{{", "[[", "style=", "cellpadding", "colspan"):
            assert junk not in doc["text"], (doc["title"], junk)
    estonia = next(d for k, d in clean_pages(pages, "enwiki", TABLES) if d and d["page_id"] == 9391)
    assert estonia["text"].startswith("Estonian economy is an advanced economy")


def test_squad_and_dpr_counts(shared_data: Path) -> None:
    squad = list(read_squad(shared_data / SQUAD, "squad"))
    assert len(squad) == 40
    assert sum(d["text"].count("\n\n") + 1 for d in squad) == 1733  # paragraphs
    assert squad[0]["title"] == "Super Bowl 50"
    dpr = list(read_dpr_json(shared_data / DPR, "dpr"))
    assert len(dpr) == 751 and len({d["doc_id"] for d in dpr}) == 751


def test_registry_hashes_match_shared_data(shared_data: Path) -> None:
    for s in load_registry().values():
        assert sha256_file(shared_data / s.path) == s.sha256, s.name


def test_blocks_of_demo_corpus_fit_and_give_back_documents(shared_data: Path, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "art")
    cfg = load_config("demo")
    docs = run_ingest(store, cfg.ingest)
    assert sum(s["kept"] for s in docs.stats.values()) == 98 + 4 + 2 + 40 + 751  # 1 table page dup
    blocks = run_chunk(store, docs.ref, cfg.chunk)
    b = store.open(blocks.ref).read_table("blocks").to_pandas()
    d = store.open(docs.ref).read_table("documents").to_pandas().set_index("doc_id")
    assert list(b.block_id) == list(range(len(b))) and len(b) > 3000
    tok = load_tokenizer(cfg.chunk.encoder)
    lengths = [len(ids) for ids in tok(list(b.title), list(b.text))["input_ids"]]
    assert max(lengths) <= 288
    assert lengths == list(b.n_wordpieces)
    for doc_id, group in b.groupby("doc_id", sort=False):
        assert re.sub(r"\s+", "", "".join(group.text)) == re.sub(r"\s+", "", d.loc[doc_id, "text"])


def test_parallel_ingest_of_real_dump(shared_data: Path, tmp_path: Path) -> None:
    cfg = IngestConfig(sources=({"kind": "wikipedia", "path": str(shared_data / GENSIM)},),
                       workers=2)
    r = run_ingest(ArtifactStore(tmp_path), cfg)
    assert r.stats[f"source0:{Path(GENSIM).name}"]["kept"] == 98
    c = run_chunk(ArtifactStore(tmp_path), r.ref, ChunkConfig(max_wordpieces=128))
    assert c.stats["documents"] == 98
