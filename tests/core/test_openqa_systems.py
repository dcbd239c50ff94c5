"""The open-QA systems of REALM Table 1 and the 2x2 that separates what REALM pretraining does
for the retriever from what it does for the reader: built from refs alone, no model loaded."""

import ast
import re
from pathlib import Path

import pytest

from realm_core.config import OpenQAEvalConfig, load_config
from realm_core.errors import ConfigError
from realm_core.graph.stages import STAGES, closure, null_only, qa_keys, stage
from realm_core.openqa.finetune_stage import qa_systems
from realm_core.query import SEARCHERS
from realm_core.store.artifacts import ArtifactRef
from realm_core.systems import ASKABLE, SYSTEM_KEYS, SYSTEMS


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


def _string_constants(path: Path) -> list[str]:
    """Every string literal of `path` but docstrings (prose may name a system)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_each_system_is_declared_once_and_everything_else_reads_the_registry() -> None:
    """A system's key is a string literal only in realm_core/systems.py across realm_core,
    flows and tasks: the keys that are nothing but system keys (the crossings) are searched for,
    whole word, in every string of the product but docstrings, and every display name of more
    than one word as a whole string; the keys shared with stage or retriever names (ict, realm, bm25, none) are checked
    where systems are listed: config defaults, stages, fine-tuning, searchers, `realm ask`."""
    root = Path(__file__).resolve().parents[2]
    registry = root / "realm_core" / "systems.py"
    keys = [s.key for s in SYSTEMS if "_" in s.key]
    names = {s.name for s in SYSTEMS if " " in s.name}  # "REALM" alone also names the pretraining run
    found: dict[str, list[str]] = {}
    for package in ("realm_core", "flows", "tasks"):
        for path in (root / package).rglob("*.py"):
            if path == registry:
                continue
            for text in _string_constants(path):
                hits = [k for k in keys if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", text)]
                hits += [text] if text in names else []
                for hit in hits:
                    found.setdefault(hit, []).append(str(path.relative_to(root)))
    assert found == {}, f"system keys or names written outside the registry: {found}"
    # where systems are listed, the list is the registry's
    cfg = load_config("tiny")
    assert OpenQAEvalConfig.model_fields["systems"].default == tuple(
        s.key for s in SYSTEMS if s.default_row)
    assert [s.name for s in STAGES if s.name.startswith("finetune_")] == [f"finetune_{s.key}" for s in SYSTEMS
                                                                         if s.finetuned]
    refs = (ArtifactRef("retriever", "/i", "h1"), ArtifactRef("realm_model", "/r", "h2"))
    assert [s.key for s in qa_systems(*refs, cfg.embed, "bundled:base", ArtifactRef("realm_model", "/n", "h3"))
            ] == list(SYSTEM_KEYS)
    assert {k: v for k, v in SEARCHERS.items() if v[1]} == {s.key: ("dense", s.key) for s in SYSTEMS if s.searcher}
    assert ASKABLE == tuple(s.key for s in SYSTEMS if s.retrieval != "none")
    with pytest.raises(ConfigError, match="expected one of"):
        load_config("tiny", overrides=["openqa_eval.systems=[bm25, orqa]"])
