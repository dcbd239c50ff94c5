"""POST /documents's request to `realm add`'s input: each source's documents one JSONL file, the
files and their source names paired in order, and a reader's complaint about a scratch file told
as the request's document that caused it."""

import json
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows.qa_service import DocumentsRequest, grow_knowledge
from realm_core.config import QueryConfig
from realm_core.errors import InputError, QueryError
from realm_core.knowledge.add import Added
from realm_core.knowledge.update import Stopped


class Recorder:
    """An add that reads what it was given, and refuses a document titled "bad" as the JSONL
    reader refuses a line (its engine's /healthz never asked here)."""

    def __init__(self, **limits: int) -> None:
        self.calls: list[dict[str, Any]] = []
        self.cfg = SimpleNamespace(query=QueryConfig(**limits))
        self.started, self.release = threading.Event(), threading.Event()
        self.release.set()  # unless a test holds the add

    def health(self) -> dict[str, Any]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {}

    def add_documents(self, paths: list[str], kind: str, names: list[str], remove_docs: list[str],
                      remove_sources: list[str], reembed_all: bool = False,
                      stop: Callable[[], bool] | None = None) -> Added:
        self.scratch = [Path(p) for p in paths]
        assert all(p.is_file() for p in self.scratch)
        self.started.set()
        while not self.release.wait(0.05):  # an add in its batches, asking `stop` between them
            if stop is not None and stop():
                raise Stopped("the knowledge corpus update was stopped; the live version is unchanged")
        files = [[json.loads(line) for line in Path(p).read_text().splitlines()] for p in paths]
        self.calls.append({"files": files, "kind": kind, "names": names, "remove": remove_docs,
                           "remove_sources": remove_sources, "reembed": reembed_all})
        for path, docs in zip(paths, files, strict=True):
            for lineno, doc in enumerate(docs, start=1):
                if doc["title"] == "bad":
                    raise InputError(path, "key 'text' to be str", position=f"line {lineno}", found="a list")
        counts = {k: 0 for k in ("documents_added", "documents_changed", "documents_removed",
                                 "documents_unchanged", "blocks_added", "blocks_removed", "blocks_reused")}
        return Added(7, 6, {**counts, "documents_added": sum(map(len, files))}, 0.5, ["h1", "h2"])


def test_each_source_becomes_one_file_paired_with_its_name() -> None:
    engine = Recorder()
    body = DocumentsRequest.model_validate({"documents": [
        {"id": "a", "title": "A", "text": "one"}, {"id": "b", "title": "B", "text": "two", "source": "wiki"},
        {"id": "c", "title": "C", "text": "three"}], "source": "notes", "remove": ["old:1"]})
    out = grow_knowledge(engine.add_documents, body)
    call = engine.calls[0]
    assert call["kind"] == "jsonl" and call["names"] == ["notes", "wiki"] and call["remove"] == ["old:1"]
    assert [[d["id"] for d in f] for f in call["files"]] == [["a", "c"], ["b"]]
    assert call["files"][1][0] == {"id": "b", "title": "B", "text": "two"}  # the JSONL line realm add reads
    assert (out["version"], out["previous_version"], out["encoders"]) == (7, 6, 2)
    assert out["counts"]["documents_added"] == 3 and "knowledge version 7" in out["summary"]


def test_a_refused_document_is_named_by_source_and_place_not_by_a_scratch_file() -> None:
    body = DocumentsRequest.model_validate({"documents": [
        {"id": "a", "title": "A", "text": "one"}, {"id": "b", "title": "B", "text": "x", "source": "wiki"},
        {"id": "c", "title": "bad", "text": "y", "source": "wiki"}]})
    with pytest.raises(InputError) as e:
        grow_knowledge(Recorder().add_documents, body)
    assert str(e.value) == ("the request's documents of source 'wiki' at document 2: expected key 'text' to be str, "
                            "found a list")


def test_a_request_that_asks_nothing_is_refused_before_the_engine_is_called() -> None:
    engine = Recorder()
    with pytest.raises(QueryError, match="nothing to do"):
        grow_knowledge(engine.add_documents, DocumentsRequest())
    assert engine.calls == []


def test_the_endpoint_is_off_unless_asked_and_takes_bounded_json_only() -> None:
    from fastapi.testclient import TestClient

    import flows.qa_service as service

    body = {"documents": [{"id": "a", "title": "A", "text": "one"}]}
    engine = Recorder(max_add_bytes=64, max_document_chars=20)
    with TestClient(service.create_app(engine, add=engine.add_documents),  # type: ignore[arg-type]
                    base_url="http://127.0.0.1") as client:
        assert client.post("/documents", json=body).status_code == 403
    with TestClient(service.create_app(engine, allow_add=True, add=engine.add_documents),  # type: ignore[arg-type]
                    base_url="http://127.0.0.1") as client:
        r = client.post("/documents", content=json.dumps(body), headers={"content-type": "text/plain"})
        assert r.status_code == 415 and r.json() == {"error": "content-type text/plain: expected application/json"}
        r = client.post("/documents", json={"documents": [{"id": "a", "title": "A", "text": "x" * 100}]})
        assert r.status_code == 413 and "query.max_add_bytes=64 bytes" in r.json()["error"]
        r = client.post("/documents", json={"documents": [{"id": "a", "text": "x" * 21}]})
        assert r.status_code == 413 and "document 'a': 21 characters" in r.json()["error"]
        assert engine.calls == []  # nothing refused reached the engine
        r = client.post("/documents", json=body)
        assert r.status_code == 200 and r.json()["version"] == 7 and engine.calls[0]["names"] == ["added"]


def test_a_repeated_id_and_an_empty_text_are_counted_and_named() -> None:
    engine = Recorder()
    body = DocumentsRequest.model_validate({"documents": [
        {"id": "a", "title": "A", "text": "one"}, {"id": "a", "title": "A again", "text": "two"},
        {"id": "w", "title": "W", "text": " \n\t "}, {"id": "a", "title": "A elsewhere", "text": "x", "source": "wiki"}]})
    answer = grow_knowledge(engine.add_documents, body)
    assert [[d["title"] for d in f] for f in engine.calls[0]["files"]] == [["A"], ["A elsewhere"]]
    assert answer["dropped"] == {"duplicate_id": ["added:a"], "empty_text": ["added:w"]}
    assert answer["counts"]["documents_dropped_duplicate_id"] == 1
    assert answer["counts"]["documents_dropped_empty_text"] == 1
    with pytest.raises(QueryError, match="no document to add: 1 with an empty text"):
        grow_knowledge(engine.add_documents, DocumentsRequest.model_validate(
            {"documents": [{"id": "w", "title": "W", "text": "   "}]}))


def test_an_add_leaves_the_service_answering_and_stops_on_shutdown() -> None:
    """An add in flight holds no lock a query needs (the health check, searches and questions
    answer meanwhile), and once the service is stopping it ends at its next batch: a 503, its
    scratch folder removed."""
    from fastapi.testclient import TestClient

    import flows.qa_service as service

    engine = Recorder()
    engine.release.clear()
    app = service.create_app(engine, allow_add=True, add=engine.add_documents)  # type: ignore[arg-type]
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        answers: dict[str, Any] = {}
        post = threading.Thread(target=lambda: answers.update(r=client.post("/documents", json={
            "documents": [{"id": "a", "title": "A", "text": "one"}]})))
        post.start()
        assert engine.started.wait(30)
        assert client.get("/healthz").status_code == 200  # answered while the add runs
        app.state.stopping.set()  # what SIGTERM sets (`run_server`)
        post.join(30)
        assert not post.is_alive()
        r = answers["r"]
        assert r.status_code == 503 and "stopped" in r.json()["error"]
        assert engine.calls == [] and engine.scratch and not any(p.exists() for p in engine.scratch)
