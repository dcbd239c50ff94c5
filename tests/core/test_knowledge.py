"""The knowledge corpus on hand-made blocks: what an update adds, keeps, replaces and removes,
with block ids and vectors checked exactly, versions, rollback and integrity."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from realm_core.errors import ConfigError, CorruptArtifactError
from realm_core.knowledge.update import initial_version, listing, plan_update, update
from realm_core.knowledge.versions import KnowledgeCorpus, doc_hash

H = "e" * 64  # one tracked encoder's hash


class CountingEmbedder:
    """Vectors from the text alone (so a block's vector is the same whenever it is embedded);
    remembers how many blocks it was asked for."""

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def __call__(self, titles: list[str], texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return np.asarray([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], dtype=np.float32)


def _chunk(doc: dict) -> list[dict]:  # type: ignore[type-arg]
    """One block a sentence (period-separated), as a stand-in for the wordpiece chunker."""
    return [{"title": doc["title"], "text": s.strip() + "."} for s in doc["text"].split(".") if s.strip()]


def _doc(doc_id: str, text: str, source: str = "notes.jsonl") -> dict:  # type: ignore[type-arg]
    return {"doc_id": doc_id, "title": doc_id.title(), "text": text, "source": source}


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[KnowledgeCorpus, CountingEmbedder]:
    """Version 1 from a two-document pretraining corpus of three blocks."""
    blocks = pa.table({"block_id": [0, 1, 2], "doc_id": ["w:a", "w:a", "w:b"], "title": ["A", "A", "B"],
                       "text": ["Alpha one.", "Alpha two.", "Beta."]})
    documents = pa.table({"doc_id": ["w:a", "w:b"], "title": ["A", "B"], "text": ["Alpha one. Alpha two.", "Beta."],
                          "source": ["enwiki", "enwiki"]})
    embed = CountingEmbedder()
    vectors = {H: embed(["A", "A", "B"], ["Alpha one.", "Alpha two.", "Beta."])}
    embed.embedded.clear()
    corpus = KnowledgeCorpus(tmp_path / "knowledge")
    first = initial_version(corpus, blocks, documents, vectors, {H: {"spec": "enc"}}, {})
    assert first.number == 1 and first.block_ids.tolist() == [0, 1, 2] and first.id_range == 3
    return corpus, embed


def test_the_plan_adds_keeps_replaces_and_removes() -> None:
    current = {"w:a": (doc_hash("A", "x"), "enwiki"), "w:b": (doc_hash("B", "y"), "enwiki"),
               "n:c": (doc_hash("C", "z"), "notes")}
    plan = plan_update(current, listing([{"doc_id": "w:a", "title": "A", "text": "x"},      # unchanged
                                         {"doc_id": "w:b", "title": "B", "text": "y2"},     # changed
                                         {"doc_id": "n:d", "title": "D", "text": "new"},    # added
                                         {"doc_id": "n:d", "title": "D", "text": "again"}]),  # the first wins
                       remove_sources=["notes"])
    assert plan.counts() == {"documents_added": 1, "documents_changed": 1, "documents_removed": 1,
                             "documents_unchanged": 1}
    assert plan.added == {"n:d": doc_hash("D", "new")} and plan.removed == {"n:c"}
    with pytest.raises(ConfigError, match="no document 'n:x'"):
        plan_update(current, [], remove_docs=["n:x"])
    with pytest.raises(ConfigError, match="both given and removed"):
        plan_update(current, [("n:c", doc_hash("C", "z"))], remove_sources=["notes"])


def test_add_readd_change_and_remove(corpus: tuple[KnowledgeCorpus, CountingEmbedder]) -> None:
    kc, embed = corpus
    v1 = kc.current()
    assert v1 is not None
    # add: only the new document's blocks are embedded; the old ones keep ids and vectors
    v2, counts = update(kc, [_doc("n:c", "Gamma one. Gamma two.")], _chunk, {H: embed})
    assert (v2.number, counts["blocks_added"], counts["blocks_reused"]) == (2, 2, 3)
    assert embed.embedded == ["Gamma one.", "Gamma two."]
    assert v2.block_ids.tolist() == [0, 1, 2, 3, 4]
    assert np.array_equal(v2.vectors(H)[:3], v1.vectors(H))
    # the same file again: nothing to do, no new version
    embed.embedded.clear()
    same, counts = update(kc, [_doc("n:c", "Gamma one. Gamma two.")], _chunk, {H: embed})
    assert same.number == 2 and counts["documents_unchanged"] == 1 and embed.embedded == []
    assert kc.versions() == [1, 2]
    # a changed document: its old blocks go, its new ones get new ids; nothing else is embedded
    v3, counts = update(kc, [_doc("n:c", "Gamma one. Gamma three.")], _chunk, {H: embed})
    assert v3.block_ids.tolist() == [0, 1, 2, 5, 6] and embed.embedded == ["Gamma one.", "Gamma three."]
    assert counts["documents_changed"] == 1 and counts["blocks_removed"] == 2
    assert v3.dense("text")[5] == "Gamma one." and v3.dense("text")[3] == ""  # 3 and 4 are gone for good
    # remove a pretraining document by id, and a source by name: ids are never given again
    v4, _ = update(kc, [], _chunk, {H: embed}, remove_docs=["w:b"])
    assert v4.block_ids.tolist() == [0, 1, 5, 6]
    v5, counts = update(kc, [_doc("n:e", "Epsilon.")], _chunk, {H: embed}, remove_sources=["notes.jsonl"])
    assert v5.block_ids.tolist() == [0, 1, 7] and counts["documents_removed"] == 1 and v5.id_range == 8
    dense = v5.vectors(H, dense=True)
    assert dense.shape == (8, 3) and not dense[2].any() and np.array_equal(dense[7], embed([""], ["Epsilon."])[0])
    # rollback: any version can be made current again
    kc.set_current(2)
    current = kc.current()
    assert current is not None and current.block_ids.tolist() == [0, 1, 2, 3, 4]


class CountingDocuments:
    """Documents made one at a time each time they are iterated (as `DocumentFiles` reads its
    files): counts the passes and how many documents were made."""

    def __init__(self, n: int) -> None:
        self.n, self.passes, self.made = n, 0, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.passes += 1
        for i in range(self.n):
            self.made += 1
            yield _doc(f"n:{i}", f"Block {i} one. Block {i} two. Block {i} three.")


def test_an_add_is_cut_embedded_and_written_in_bounded_batches(
        corpus: tuple[KnowledgeCorpus, CountingEmbedder]) -> None:
    """Memory holds one batch of new blocks, whatever the input's size: the encoder is never
    given more than a batch, the documents are streamed (read twice, never held), and the
    version written batch by batch equals the one the whole input gives at once."""
    kc, embed = corpus
    sizes: list[int] = []

    def batched(titles: list[str], texts: list[str]) -> np.ndarray:
        sizes.append(len(texts))
        return embed(titles, texts)

    docs = CountingDocuments(40)  # 120 blocks
    v2, counts = update(kc, docs, _chunk, {H: batched}, batch_blocks=10)
    assert counts["blocks_added"] == 120 and counts["blocks_reused"] == 3 and sum(sizes) == 120
    assert max(sizes) <= 10 + 2  # a batch closes on a document's end: at most one document's blocks over
    assert docs.passes == 2 and docs.made == 80  # planned from one reading, cut from a second
    assert v2.block_ids.tolist() == list(range(123)) and v2.manifest["blocks"] == 123
    assert v2.manifest["counts"] == counts and v2.verify() > 0
    whole = KnowledgeCorpus(kc.root.parent / "whole")
    first = kc.version(1)
    initial_version(whole, first.table, pa.table({"doc_id": ["w:a", "w:b"], "title": ["A", "B"],
                                                   "text": ["Alpha one. Alpha two.", "Beta."],
                                                   "source": ["enwiki", "enwiki"]}),
                    {H: first.vectors(H)}, {H: {"spec": "enc"}}, {})
    at_once, _ = update(whole, list(CountingDocuments(40)), _chunk, {H: embed}, batch_blocks=10**6)
    assert at_once.table.equals(v2.table) and np.array_equal(at_once.vectors(H), v2.vectors(H))


def test_a_stopped_add_publishes_nothing_and_leaves_nothing(corpus: tuple[KnowledgeCorpus, CountingEmbedder]) -> None:
    from realm_core.knowledge.update import Stopped

    kc, embed = corpus
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # the third batch is refused

    with pytest.raises(Stopped, match="live version is unchanged"):
        update(kc, CountingDocuments(40), _chunk, {H: embed}, batch_blocks=10, stop=stop)
    assert kc.current_number() == 1 and kc.versions() == [1]
    assert not any(p.name.startswith(".tmp") for p in kc.root.iterdir())


def test_a_failed_update_leaves_the_live_version(corpus: tuple[KnowledgeCorpus, CountingEmbedder]) -> None:
    kc, embed = corpus

    def broken(titles: list[str], texts: list[str]) -> np.ndarray:
        raise RuntimeError("the encoder failed")

    with pytest.raises(RuntimeError):
        update(kc, [_doc("n:c", "Gamma.")], _chunk, {H: broken})
    assert kc.current_number() == 1 and kc.versions() == [1]
    assert not any(p.name.startswith(".tmp") for p in kc.root.iterdir())
    with pytest.raises(ConfigError, match="no embedder for tracked encoder"):
        update(kc, [_doc("n:c", "Gamma.")], _chunk, {})


def test_a_version_checks_its_files(corpus: tuple[KnowledgeCorpus, CountingEmbedder]) -> None:
    kc, _ = corpus
    v1 = kc.current()
    assert v1 is not None and v1.verify() > 0
    (v1.path / "blocks.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CorruptArtifactError, match="blocks.parquet"):
        v1.verify()
    (kc.root / "CURRENT").write_text("{}")
    with pytest.raises(Exception, match="corrupt knowledge pointer"):
        kc.current()
    assert json.loads((v1.path / "manifest.json").read_text())["counts"]["blocks_added"] == 3


def test_several_files_each_with_its_source_name(tmp_path: Path) -> None:
    from realm_core.config import load_config
    from realm_core.knowledge.add import read_documents, source_names

    files = []
    for stem, doc_id in (("notes", "n1"), ("wiki.part2", "w1")):
        files.append(str(tmp_path / f"{stem}.jsonl"))
        Path(files[-1]).write_text(json.dumps({"id": doc_id, "title": stem, "text": f"{stem} text."}) + "\n")
    assert source_names(files, None) == ["notes", "wiki"]  # each file's name up to its first dot
    assert source_names(files, "extra") == ["extra", "extra"]
    assert source_names(files, ["squad", "enwiki"]) == ["squad", "enwiki"]
    with pytest.raises(ConfigError, match="--name given 3 times for 2 files"):
        source_names(files, ["a", "b", "c"])
    docs = list(read_documents(files, "jsonl", ["squad", "enwiki"], load_config("tiny").ingest))
    assert [(d["source"], d["title"]) for d in docs] == [("squad", "notes"), ("enwiki", "wiki.part2")]
    assert docs[0]["doc_id"].startswith("squad") and docs[1]["doc_id"].startswith("enwiki")
