import json
from pathlib import Path

import numpy as np
import pytest
import torch

from realm_core.answers import token_string
from realm_core.blocks import run_chunk
from realm_core.config import EmbedConfig, load_config
from realm_core.errors import ConfigError, InputError
from realm_core.ingest.stage import run_ingest
from realm_core.questions import dpr_questions, squad_questions
from realm_core.retrieval.evaluation import (
    RetrieverSystem,
    first_hits,
    recall_metrics,
    run_evaluate_retrieval,
    standard_systems,
)
from realm_core.retrieval.retrievers import (
    BM25,
    RETRIEVERS,
    Blocks,
    Dense,
    Proposal,
    Question,
    Retriever,
)
from realm_core.retrieval.stage import run_embed_blocks
from realm_core.retrieval.warm_start import doc_encoder_dir, run_warm_start_ict
from realm_core.spans.mining import run_mine_spans
from realm_core.store.artifacts import ArtifactStore

BLOCKS = ["Paris is the capital of France.", "Berlin is the capital of Germany.",
          "The Loire is the longest river in France.", "Bonn was the capital of West Germany."]


def test_first_hits_and_metrics_are_exact() -> None:
    tokens = [token_string(t) for t in BLOCKS]
    ranked = np.array([[1, 0, 2], [2, 3, 0], [1, 2, 3]])
    hits = first_hits(ranked, [("Paris",), ("Bonn",), ("Madrid",)], lambda b: tokens[b])
    assert hits.tolist() == [2, 2, 0]
    m = recall_metrics(hits, (1, 2), 3)
    assert m == {"R@1": 0.0, "R@2": pytest.approx(2 / 3), "MRR@3": pytest.approx((0.5 + 0.5) / 3)}


class FixedQueries(Dense):
    """Dense with the query embeddings given, so that the ranking is known exactly."""

    def __init__(self, blocks: Blocks, vectors: np.ndarray, queries: np.ndarray) -> None:
        super().__init__(blocks, 2, None, None, vectors, 8)
        self.queries = torch.from_numpy(queries)

    def embed(self, questions: list) -> torch.Tensor:  # type: ignore[type-arg]
        return self.queries[:len(questions)]


def test_bm25_and_dense_rank_within_the_candidates() -> None:
    blocks = Blocks([""] * 4, BLOCKS)
    candidates = np.array([0, 2, 3])  # Berlin's block is not searched
    bm25 = BM25(blocks, 3)
    asked = [Question("capital of Germany"), Question("longest river")]
    ranked = bm25.propose(asked, candidates).ids
    assert ranked[0, 0] == 3 and 1 not in ranked[0] and ranked[1, 0] == 2
    assert bm25.propose(asked).ids[0, 0] == 1  # over every block, Berlin's is first
    dense = FixedQueries(blocks, np.eye(4, dtype=np.float32), np.array([[0.2, 1, 0, 0.5]], np.float32))
    assert dense.propose([Question("q")], candidates).ids.tolist() == [[3, 0]]  # block 1 is not a candidate
    assert dense.propose([Question("q")]).ids.tolist() == [[1, 3]]


class TitleMatch(Retriever):
    """A retriever added the way CONTRIBUTING.md shows: words shared with the block's title."""

    name = "title"
    retrieves = True

    def propose(self, questions: list, candidates: np.ndarray | None = None) -> Proposal:  # type: ignore[type-arg]
        among = np.arange(self.blocks.corpus_size) if candidates is None else candidates
        words = [set(self.blocks.titles[b].lower().split()) for b in among]
        scores = np.array([[len(w & set(q.question.lower().split())) for w in words] for q in questions],
                          dtype=np.float32)  # (B, C)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :self.top_k]
        return Proposal(among[order], np.take_along_axis(scores, order, axis=1))


def test_a_new_retriever_is_one_class_and_one_registry_line(shared_data: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RETRIEVERS, "title", TitleMatch)  # the registry line
    cfg = load_config("tiny")
    store = ArtifactStore(tmp_path / "art")
    blocks = run_chunk(store, run_ingest(store, cfg.ingest).ref, cfg.chunk)
    result = run_evaluate_retrieval(store, blocks.ref, [RetrieverSystem("BM25", "bm25"),
                                                        RetrieverSystem("title words", "title")], cfg.retrieval_eval)
    squad = store.open(result.ref).manifest["results"]["squad-open"]["systems"]
    assert set(squad) == {"BM25", "title words"}
    # titles alone find the article, not the paragraph: well below BM25, above nothing
    assert 0 < squad["title words"]["R@20"] < squad["BM25"]["R@20"]
    with pytest.raises(ConfigError, match="kind 'nope', expected one of none, gold, bm25, dense, index, title"):
        RetrieverSystem("x", "nope")


def test_question_sets_count_what_they_drop(tmp_path: Path) -> None:
    path = tmp_path / "dpr.json"
    path.write_text(json.dumps([{"question": "who?", "answers": ["Ada"]}, {"question": "what?", "answers": []}]))
    qs = dpr_questions(path)
    assert [q.answers for q in qs.questions] == [("Ada",)] and qs.dropped == {"no answer": 1}
    path.write_text("{}")
    with pytest.raises(InputError, match="dpr.json.*a JSON list of DPR records"):
        dpr_questions(path)


def test_squad_open_articles_30_to_39(shared_data: Path) -> None:
    qs = squad_questions(shared_data / "squad/squad-v1.1-dev.articles-00-39.json", (30, 39))
    assert len(qs.questions) == 1971 and qs.dropped == {"no answer": 0}
    assert len({q.qid for q in qs.questions}) == 1971


def test_tiny_evaluation_measures_every_system_in_one_run(shared_data: Path, tmp_path: Path) -> None:
    cfg = load_config("tiny")  # SQuAD-open on its corpus's articles 1-2 (359 questions)
    store = ArtifactStore(tmp_path / "art")
    docs = run_ingest(store, cfg.ingest)
    blocks = run_chunk(store, docs.ref, cfg.chunk)
    spans = run_mine_spans(store, blocks.ref, cfg.spans)
    retriever = run_warm_start_ict(store, blocks.ref, spans.ref, cfg.ict)
    systems = standard_systems(retriever.ref, cfg.embed, cfg.ict.encoder, cfg.ict.projection_dim, cfg.ict.seed)
    result = run_evaluate_retrieval(store, blocks.ref, systems, cfg.retrieval_eval)
    results = store.open(result.ref).manifest["results"]
    assert set(results) == {"squad-open", "dpr-nq-sample"}
    squad = results["squad-open"]
    assert squad["blocks"] == 612 and squad["questions"] > 300
    assert set(squad["systems"]) == {"BM25", "untrained projection", "ICT", "all-MiniLM-L6-v2 mean pooling"}
    # SQuAD questions share many words with their paragraph: BM25 finds most of them
    assert squad["systems"]["BM25"]["R@20"] > 0.8
    assert results["dpr-nq-sample"]["blocks"] < 612
    rows = store.open(result.ref).read_table("retrieval_results")
    assert rows.num_rows == 4 * (squad["questions"] + results["dpr-nq-sample"]["questions"])
    assert "| BM25 |" in result.report
    assert run_evaluate_retrieval(store, blocks.ref, systems, cfg.retrieval_eval).cached is True
    # the index's embeddings (its encoder named by `encoder_from`) are the ICT row's: one artifact
    index_embed = cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(retriever.ref),
                                               "encoder_from": "config"})
    assert run_embed_blocks(store, blocks.ref, index_embed).cached is True
    # the demo's pipeline leaves the two reference rows (two corpus embeddings) to bench/retrieval.py
    lean = standard_systems(retriever.ref, cfg.embed, cfg.ict.encoder, cfg.ict.projection_dim, cfg.ict.seed,
                            references=False)
    assert [s.name for s in lean] == ["BM25", "ICT"] and not load_config("demo").retrieval_eval.reference_rows
    # a corpus without the SQuAD articles cannot be evaluated on SQuAD-open
    with pytest.raises(ConfigError, match="SQuAD-open needs the SQuAD articles"):
        run_evaluate_retrieval(store, blocks.ref, systems[:1],
                               cfg.retrieval_eval.model_copy(update={"squad_source": "nope"}))


def test_a_retriever_systems_key_holds_settings_not_paths() -> None:
    """The evaluation's cache key: a dense system's encoders enter it by content (beside this key),
    so the same settings with encoders elsewhere key alike, and a changed setting does not."""
    here = RetrieverSystem("ICT", "dense", "/a/query_encoder", EmbedConfig(doc_encoder="/a/doc_encoder"))
    moved = RetrieverSystem("ICT", "dense", "/b/query_encoder", EmbedConfig(doc_encoder="/b/doc_encoder"))
    assert here.key() == moved.key()
    assert "/a" not in str(here.key())
    shorter = RetrieverSystem("ICT", "dense", "/a/query_encoder",
                              EmbedConfig(doc_encoder="/a/doc_encoder", max_length=128))
    assert shorter.key() != here.key()
    assert RetrieverSystem("BM25", "bm25").key() == {"name": "BM25", "kind": "bm25", "doc_embed": None}
