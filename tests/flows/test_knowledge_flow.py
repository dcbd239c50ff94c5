"""The nightly `grow-knowledge` flow on the tiny preset: a folder's documents added (only their
blocks embedded), a second night with one file more and one gone (`prune`), and its report."""

import json
import shutil
from pathlib import Path

import pytest

from flows.knowledge import grow_knowledge
from realm_core.config import load_config
from realm_core.graph.resolver import Resolver
from realm_core.knowledge.versions import KnowledgeCorpus
from realm_core.store.artifacts import ArtifactStore
from tests.conftest import TinyUpstream

pytestmark = pytest.mark.slow
UNTRAINED = ["embed.encoder_from=config"]


def _write(folder: Path, name: str, doc_id: str, text: str) -> None:
    (folder / name).write_text(json.dumps({"id": doc_id, "title": doc_id.title(), "text": text}) + "\n")


def test_two_nights_of_a_documents_folder(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    shutil.copytree(tiny_upstream[0], root)
    Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(root)).run("index")
    folder = tmp_path / "documents"
    folder.mkdir()
    empty = grow_knowledge(preset="tiny", overrides=UNTRAINED, root=root, folder=str(folder))
    assert empty["version"] is None  # nothing to add and no corpus yet: the pretraining corpus answers
    _write(folder, "north.jsonl", "n1", "The river Quux runs north through Quarnia.")
    first = grow_knowledge(preset="tiny", overrides=UNTRAINED, root=root, folder=str(folder))
    assert first["version"] == 2 and first["counts"]["documents_added"] == 1
    _write(folder, "south.jsonl", "s1", "The river Plim runs south of Quarnia.")
    (folder / "north.jsonl").unlink()
    second = grow_knowledge(preset="tiny", overrides=UNTRAINED, root=root, folder=str(folder), prune=True)
    c = second["counts"]
    assert (c["documents_added"], c["documents_removed"], c["documents_unchanged"]) == (1, 1, 0)
    sources = set(KnowledgeCorpus(f"{root}/knowledge").current().table.column("source").to_pylist())
    assert "south" in sources and "north" not in sources
