"""The open-QA systems of REALM Table 1 and the 2x2 that separates what REALM pretraining does
for the retriever from what it does for the reader: built from refs alone, no model loaded."""

from pathlib import Path

from realm_core.artifacts import ArtifactRef
from realm_core.config import load_config
from realm_core.graph import closure, null_only, qa_keys, stage
from realm_core.openqa.finetune_stage import qa_systems


def test_the_2x2_crosses_encoders_and_reader_starts() -> None:
    cfg = load_config("tiny")
    ict, realm = ArtifactRef("retriever", "/a/retriever/ict", "h1"), ArtifactRef("realm_model", "/a/realm_model/r", "h2")
    systems = {s.key: s for s in qa_systems(ict, realm, cfg.embed, "bundled:base")}
    assert list(systems) == ["none", "bm25", "ict", "realm", "ict_realm_reader", "realm_baseline_reader"]
    cells = {k: (s.query_encoder, s.doc_embed.doc_encoder if s.doc_embed else None, s.reader)
             for k, s in systems.items() if s.retrieval == "dense"}
    assert cells == {
        "ict": ("/a/retriever/ict/query_encoder", "/a/retriever/ict/doc_encoder", "bundled:base"),
        "realm": ("/a/realm_model/r/query_encoder", "/a/realm_model/r/doc_encoder", "/a/realm_model/r/reader"),
        "ict_realm_reader": ("/a/retriever/ict/query_encoder", "/a/retriever/ict/doc_encoder", "/a/realm_model/r/reader"),
        "realm_baseline_reader": ("/a/realm_model/r/query_encoder", "/a/realm_model/r/doc_encoder", "bundled:base"),
    }
    # without REALM pretraining only the rows that do not need it exist
    assert [s.key for s in qa_systems(ict, None, cfg.embed)] == ["none", "bm25", "ict"]
    # the null-only run's reader behind ICT's encoders
    null = ArtifactRef("realm_model", "/a/realm_model/n", "h3")
    row = qa_systems(ict, realm, cfg.embed, "bundled:base", null)[-1]
    assert (row.key, row.query_encoder, row.doc_embed.doc_encoder if row.doc_embed else None, row.reader) == (
        "ict_null_reader", "/a/retriever/ict/query_encoder", "/a/retriever/ict/doc_encoder", "/a/realm_model/n/reader")


def test_crossed_systems_are_stages_that_need_pretraining_and_leave_with_it() -> None:
    both = ["openqa_eval.systems=[bm25, ict_realm_reader, realm_baseline_reader]"]
    cfg = load_config("tiny", overrides=both)
    assert qa_keys(cfg) == ["bm25", "ict_realm_reader", "realm_baseline_reader"]
    for key in ("ict_realm_reader", "realm_baseline_reader"):
        assert {"ict", "pretrain"} <= set(stage(f"finetune_{key}").upstream(cfg))
    assert "finetune_ict_realm_reader" in closure(cfg, ["openqa_eval"])
    null = load_config("tiny", overrides=[*both, "pretrain.retrieval=null_only"])
    assert qa_keys(null) == ["bm25"]


def test_the_null_only_reader_row_resolves_the_null_only_run_of_the_same_config() -> None:
    cfg = load_config("tiny", overrides=["openqa_eval.systems=[ict, ict_null_reader]"])
    assert qa_keys(cfg) == ["ict", "ict_null_reader"]
    assert {"ict", "pretrain_null"} <= set(stage("finetune_ict_null_reader").upstream(cfg))
    assert "pretrain" not in closure(cfg, ["openqa_eval"])  # REALM's own run is not needed for it
    # the stage runs the config experiments/pretrain.py's null-only row resolves: one cache key for both
    by_override = load_config("tiny", overrides=["pretrain.retrieval=null_only"])
    assert null_only(cfg).pretrain.config_hash() == by_override.pretrain.config_hash()
    assert null_only(cfg).pretrain.config_hash() != cfg.pretrain.config_hash()
    assert stage("pretrain_null").config(cfg)["pretrain"]["retrieval"] == "null_only"
    # it does not depend on REALM pretraining retrieving
    assert qa_keys(load_config("tiny", overrides=["openqa_eval.systems=[ict_null_reader]",
                                                  "pretrain.retrieval=null_only"])) == ["ict_null_reader"]


def test_a_systems_cache_key_holds_its_encoders_content_not_their_paths(tmp_path: Path) -> None:
    """A copied store (every artifact path changes) hits the caches of the stages a system keys:
    the embeddings, its fine-tuning and the evaluation."""
    cfg = load_config("tiny")
    for name in ("a", "b"):
        for part in ("retriever/ict/query_encoder", "retriever/ict/doc_encoder"):
            encoder = tmp_path / name / part
            encoder.mkdir(parents=True)
            (encoder / "config.json").write_text('{"hidden_size": 8}')
            (encoder / "model.safetensors").write_bytes(part.encode())
    a, b = (qa_systems(ArtifactRef("retriever", str(tmp_path / n / "retriever/ict"), "h1"), None, cfg.embed,
                       str(tmp_path / n / "retriever/ict/query_encoder"))[-1] for n in ("a", "b"))
    assert a.doc_embed is not None and b.doc_embed is not None and a.doc_embed.doc_encoder != b.doc_embed.doc_encoder
    assert a.doc_embed.config_hash() == b.doc_embed.config_hash()
    assert a.hashes() == b.hashes()
    # what the encoders hold and how the blocks are embedded are in the key
    (tmp_path / "b/retriever/ict/doc_encoder/model.safetensors").write_bytes(b"other weights")
    assert a.hashes()["doc_encoder"] != b.hashes()["doc_encoder"]
    longer = a.doc_embed.model_copy(update={"max_length": a.doc_embed.max_length + 1})
    assert longer.config_hash() != a.doc_embed.config_hash()
