"""The knowledge corpus on the tiny preset's artifacts: add, re-add, change and remove a document
with `realm add`'s function and command, each checked on block ids, reused vectors and search
results; a bad file leaves the live version; a running service answers from a document added
while it runs, and follows a rollback; with --allow-add the service adds documents itself (JSON
only, refused unless asked for); an exported system loads with plain transformers and
answers as the store did with the store gone, and grows."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from flows.qa_service import create_app
from realm_core.config import load_config
from realm_core.graph.resolver import Resolver
from realm_core.knowledge.add import add_documents, tracked_encoders
from realm_core.knowledge.versions import KnowledgeCorpus
from realm_core.query import QueryEngine
from realm_core.store.artifacts import ArtifactStore
from tests.conftest import TinyUpstream

pytestmark = pytest.mark.slow
UNTRAINED = ["embed.encoder_from=config"]  # the first index: the bundled encoder as it is (step 0)
LOCAL = "http://127.0.0.1"
QUESTION = "Which city is the capital of Quarnia?"
FACT = ("Zorblax is the capital of Quarnia, a country of the northern steppe. Quarnia's parliament "
        "meets in Zorblax every spring.")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_upstream: TinyUpstream) -> str:
    """BM25's fine-tuned system and a first index, in a copy of the session's tiny upstream."""
    root = str(tmp_path_factory.mktemp("knowledge") / "art")
    shutil.copytree(tiny_upstream[0], root)
    stages = Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(root))
    stages.run("finetune_bm25")
    stages.run("finetune_ict")
    stages.run("index")
    return root


def _resolver(root: str) -> Resolver:
    return Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(root))


def _notes(path: Path, text: str = FACT, doc_id: str = "q1") -> Path:
    path.write_text(json.dumps({"id": doc_id, "title": "Quarnia", "text": text}) + "\n")
    return path


def _titles(engine: QueryEngine, retriever: str, query: str = QUESTION, k: int = 3) -> list[str]:
    return [h.title for h in engine.search([query], retriever, k)[0]]


def test_add_readd_change_remove_and_roll_back(root: str, tmp_path: Path) -> None:
    resolver = _resolver(root)
    engine = QueryEngine(_resolver(root))
    corpus = KnowledgeCorpus.of_store(resolver.store)
    assert corpus.current() is None and "Quarnia" not in _titles(engine, "bm25")
    # the encoders the query side searches with: the index's, and ICT's (its artifacts exist here)
    encoders = tracked_encoders(resolver)
    assert len(encoders) == 2
    notes = _notes(tmp_path / "notes.jsonl")

    added = add_documents(resolver, [str(notes)])
    first, second = corpus.version(1), corpus.version(2)
    chunk = resolver.store.open(resolver.ref("chunk"), kind="blocks").read_table("blocks", ["block_id"])
    assert first.block_ids.tolist() == chunk.column("block_id").to_pylist()  # the pretraining corpus, as cut
    assert (added.version, added.previous) == (2, None) and added.counts["documents_added"] == 1
    new = second.block_ids[len(first.block_ids):]
    assert len(new) == added.counts["blocks_added"] >= 1 and new[0] == first.id_range  # ids past every old one
    for h in encoders:  # every old block keeps its vector; only the new ones were embedded
        assert np.array_equal(second.vectors(h)[:len(first.block_ids)], first.vectors(h))
    assert added.counts["blocks_embedded"] == len(new) * len(encoders)
    # the query side answers from it at once: BM25 and the index find the new block
    assert _titles(engine, "bm25")[0] == "Quarnia"
    assert int(new[0]) in [h.block_id for h in engine.search([FACT], "index", 3)[0]]
    asked = engine.ask([QUESTION], "bm25")[0]
    assert set(map(int, new)) & set(asked.block_ids)  # the reader read the new document's block

    again = add_documents(resolver, [str(notes)])  # the same file: nothing changes
    assert again.version == 2 and again.counts["documents_unchanged"] == 1 and corpus.versions() == [1, 2]

    changed = add_documents(resolver, [str(_notes(tmp_path / "notes.jsonl", FACT.replace("spring", "autumn")))])
    third = corpus.version(changed.version)
    assert changed.counts["documents_changed"] == 1 and changed.counts["blocks_removed"] == len(new)
    assert not set(new) & set(third.block_ids) and third.block_ids.max() >= second.id_range
    assert "autumn" in " ".join(h.snippet for h in engine.search([QUESTION], "bm25", 1)[0])

    removed = add_documents(resolver, remove_sources=["notes"])
    assert removed.counts["documents_removed"] == 1 and "Quarnia" not in _titles(engine, "bm25")
    assert corpus.current_number() == removed.version
    corpus.set_current(2)  # a rollback: the query side follows the pointer
    assert _titles(engine, "bm25")[0] == "Quarnia"


def test_a_bad_file_leaves_the_live_version_and_the_command_says_why(root: str, tmp_path: Path) -> None:
    corpus = KnowledgeCorpus.of_store(ArtifactStore(root))
    add_documents(_resolver(root), [str(_notes(tmp_path / "ok.jsonl", "Quux is a river of Quarnia.", "r1"))])
    live, versions = corpus.current_number(), corpus.versions()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "title": "T", "text": "fine"}) + "\n{not json\n")
    r = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "add",
                        str(bad), "--preset", "tiny", "--root", root, *[a for s in UNTRAINED for a in ("--set", s)]],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad.jsonl" in r.stderr and "line 2" in r.stderr, r.stderr
    assert corpus.current_number() == live and corpus.versions() == versions
    r = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "knowledge",
                        "--preset", "tiny", "--root", root], capture_output=True, text=True)
    assert r.returncode == 0 and "knowledge" in r.stdout and "*" in r.stdout, r.stderr  # the current one marked


def test_the_service_answers_from_a_document_added_while_it_runs(root: str, tmp_path: Path) -> None:
    engine = QueryEngine(_resolver(root))
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as client:
        query = "Which moon orbits Quarnia's twin planet Vellum?"
        before = client.get("/search", params={"q": query, "k": 3, "retriever": "bm25"}).json()
        assert "Vellum" not in [h["title"] for h in before["hits"]]
        doc = tmp_path / "vellum.jsonl"
        doc.write_text(json.dumps({"id": "v1", "title": "Vellum", "text": "Vellum is Quarnia's twin planet; the "
                                   "moon Oskar orbits Vellum."}) + "\n")
        added = add_documents(_resolver(root), [str(doc)])  # another process would do the same
        after = client.get("/search", params={"q": query, "k": 3, "retriever": "bm25"}).json()
        assert after["hits"][0]["title"] == "Vellum"
        assert client.get("/healthz").json()["knowledge_version"] == added.version


def test_the_service_adds_documents_in_its_own_process_when_allowed(root: str) -> None:
    corpus = KnowledgeCorpus.of_store(ArtifactStore(root))
    engine = QueryEngine(_resolver(root))
    body = {"documents": [{"id": "m1", "title": "Oskarine", "text": "Oskarine is the ice moon of Quarnia's "
                           "sister world; its geysers freeze into spires.", "source": "moons"},
                          {"id": "p1", "title": "Tethra", "text": "Tethra is a gas planet whose rings hum."}],
            "source": "planets"}
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as client:
        r = client.post("/documents", json=body)  # off unless asked for
        assert r.status_code == 403 and "--allow-add" in r.json()["error"]
    live = corpus.current_number()
    with TestClient(create_app(engine, allow_add=True), raise_server_exceptions=False, base_url=LOCAL) as client:
        # what a page on another origin could send without a preflight is refused
        for headers in ({"content-type": "text/plain"}, {"content-type": ""}):
            r = client.post("/documents", content=json.dumps(body), headers=headers)
            assert r.status_code == 415 and "application/json" in r.json()["error"]
        r = client.post("/documents", json={"documents": [{"id": "x", "title": "T", "text": ""}]})
        assert r.status_code == 422 and r.json()["error"].startswith("documents.0.text")
        r = client.post("/documents", json={"document": []})  # a misspelt field is not ignored
        assert r.status_code == 422 and "document" in r.json()["error"]
        r = client.post("/documents", json={})
        assert r.status_code == 400 and "nothing to do" in r.json()["error"]
        assert corpus.current_number() == live  # nothing refused was published
        assert client.get("/healthz").json()["accepts_documents"] is True

        r = client.post("/documents", json=body)
        assert r.status_code == 200, r.text
        added = r.json()
        assert added["previous_version"] == live and added["version"] == corpus.current_number() != live
        assert added["counts"]["documents_added"] == 2 and added["counts"]["blocks_embedded"] >= 2
        version = corpus.version(added["version"])
        sources = dict(zip(version.table.column("doc_id").to_pylist(), version.table.column("source").to_pylist(),
                           strict=True))
        assert sources["moons:m1"] == "moons" and sources["planets:p1"] == "planets"  # each its own source
        hits = client.get("/search", params={"q": "Which moon has geysers that freeze?", "k": 3,
                                             "retriever": "bm25"}).json()
        assert hits["hits"][0]["title"] == "Oskarine"
        assert client.get("/healthz").json()["knowledge_version"] == added["version"]
        again = client.post("/documents", json=body).json()  # the same documents: a no-op
        assert again["version"] == added["version"] and again["counts"]["documents_unchanged"] == 2
        gone = client.post("/documents", json={"remove_source": ["moons", "planets"]}).json()
        assert gone["counts"]["documents_removed"] == 2
        assert "Oskarine" not in [h["title"] for h in client.get("/search", params={
            "q": "Which moon has geysers that freeze?", "k": 3, "retriever": "bm25"}).json()["hits"]]


def test_an_exported_system_answers_with_the_store_gone_and_grows(root: str, tmp_path: Path) -> None:
    from transformers import AutoModel

    from realm_core.errors import CorruptArtifactError
    from realm_core.system_bundle import BundleEngine, bundle_add, export_system

    store = tmp_path / "store"
    shutil.copytree(root, store)
    engine = QueryEngine(_resolver(str(store)))
    asked = engine.ask([QUESTION], "ict")[0]
    (tmp_path / "out").mkdir()  # an export's parent must exist: a mistyped path is refused, not made
    dest = export_system(_resolver(str(store)), "ict", tmp_path / "out" / "ict")
    for folder in ("reader", "query_encoder", "doc_encoder"):  # plain transformers loads each body
        assert AutoModel.from_pretrained(str(dest / folder)).config.model_type == "bert"
        assert "## Reproduce" in (dest / folder / "README.md").read_text()
    manifest = json.loads((dest / "system.json").read_text())
    assert manifest["system"] == "ict" and "knowledge/v00000001/blocks.parquet" in manifest["files"]
    # to a new folder, the store gone: the same answer and the same ranked blocks
    moved = tmp_path / "elsewhere"
    shutil.copytree(dest, moved)
    shutil.rmtree(store)
    shutil.rmtree(dest)
    bundle = BundleEngine(moved)
    again = bundle.ask([QUESTION], "ict")[0]
    assert (again.answer, again.block_id, again.block_ids) == (asked.answer, asked.block_id, asked.block_ids)
    # its search is its own retriever's (the fine-tuned query encoder): the blocks the store's system read
    assert [h.block_id for h in bundle.search([QUESTION], "index", len(asked.block_ids))[0]] == asked.block_ids
    assert bundle.health()["knowledge_version"] == 1
    r = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "ask",
                        QUESTION, "--system-dir", str(moved), "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["answer"] == asked.answer, r.stderr
    # served in int8 when asked: query.* settings only, the rest is what it was exported with
    import torch

    from realm_core.errors import ConfigError
    from realm_core.system_bundle import query_settings

    int8 = BundleEngine(moved, query_settings(moved, ["query.precision=int8"]))
    got = int8.ask([QUESTION], "ict")[0]
    assert int8.cfg.query.precision == "int8" and len(got.block_ids) == len(asked.block_ids)
    for model in int8._system("ict").models.modules().values():  # the reader and the query encoder
        assert any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in model.modules())
    with pytest.raises(ConfigError, match="query.. settings only"):
        query_settings(moved, ["finetune.top_k=3"])
    r = subprocess.run([sys.executable, "-c", "from flows.cli import main; main()", "ask",
                        QUESTION, "--system-dir", str(moved), "--set", "embed.precision=int8"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "query.* settings only" in r.stderr, r.stderr
    # it grows, by the command's function and through its own service: the new document's block is
    # searched and read at once (documents no earlier test put in the shared store, so that the
    # export cannot hold them)
    fact = "Brindlemoor is a harbour town of Quarnia where amber is traded."
    grown = bundle_add(moved, [str(_notes(tmp_path / "exported.jsonl", fact, "b1"))])
    assert grown.version == 2 and grown.counts["blocks_embedded"] == grown.counts["blocks_added"] >= 1
    assert "Brindlemoor" in bundle.search([fact], "bm25", 1)[0][0].snippet
    fact = "Quillhaven is a lake village of Quarnia famed for glass boats."
    with TestClient(create_app(bundle, allow_add=True), raise_server_exceptions=False, base_url=LOCAL) as client:
        r = client.post("/documents", json={"documents": [{"id": "q9", "title": "Quillhaven", "text": fact}]})
        assert r.status_code == 200 and r.json()["version"] == 3, r.text
        assert client.get("/search", params={"q": fact, "k": 1, "retriever": "bm25"}).json()["hits"][0]["title"] \
            == "Quillhaven"
    # a file that changed after the export is refused by the health check, naming it
    config = (moved / "reader" / "config.json").read_bytes()
    (moved / "reader" / "config.json").write_text("{}")
    with pytest.raises(CorruptArtifactError, match="reader/config.json"):
        bundle.health()
    (moved / "reader" / "config.json").write_bytes(config)
    # one flipped byte in the reader's weights: refused by every route of the running service
    # (its models already loaded) and by the command, naming the file, before any answer
    weights = moved / "reader" / "model.safetensors"
    _flip_byte(weights)
    with TestClient(create_app(bundle), raise_server_exceptions=False, base_url=LOCAL) as client:
        for route, params in (("/ask", {"q": QUESTION}), ("/search", {"q": QUESTION}), ("/healthz", {})):
            r = client.get(route, params=params)
            assert r.status_code == 503 and str(weights) in r.json()["error"], (route, r.text)
    r = _realm("ask", QUESTION, "--system-dir", str(moved))
    assert r.returncode == 2 and f"error: {weights}" in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr


def test_the_query_side_reads_in_int8_when_asked(root: str) -> None:
    import torch

    cfg = load_config("tiny", overrides=[*UNTRAINED, "query.precision=int8"])
    engine = QueryEngine(Resolver(cfg, ArtifactStore(root)))
    fp32 = QueryEngine(_resolver(root)).ask([QUESTION], "bm25")[0]
    int8 = engine.ask([QUESTION], "bm25")[0]
    reader = engine._system("bm25").models.reader
    assert any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in reader.modules())
    assert int8.block_ids == fp32.block_ids  # BM25 retrieves as before; the reader read them in int8
    # its answer is a span of a block it read, where that block says it is
    assert int8.answer and int8.block_id in int8.block_ids and int8.block_text is not None
    assert int8.block_text[int8.char_start:int8.char_end] == int8.answer


def _flip_byte(path: Path) -> None:
    """One bit-rotted byte in the middle of `path`: its size and name unchanged."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _realm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, timeout=600)


def test_damaged_knowledge_files_are_refused_by_the_command_and_every_route(root: str, tmp_path: Path) -> None:
    """A damaged file of the live knowledge version is never searched or read: the running
    service (its vectors already loaded) answers 503 on each route, the command ends in `error:
    FILE` with exit 2, and random bytes in its blocks are the same error, never a traceback."""
    store = _fresh(root, tmp_path / "s")
    add_documents(_resolver(store), [str(_notes(tmp_path / "a.jsonl", FACT, "a"))])
    engine = QueryEngine(_resolver(store))
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as client:
        assert client.get("/search", params={"q": QUESTION}).status_code == 200
        assert client.get("/ask", params={"q": QUESTION, "system": "bm25"}).status_code == 200
        version = Path(store) / "knowledge" / "v00000002"
        vectors = next(version.glob("vectors-*.npy"))
        _flip_byte(vectors)
        for route, params in (("/search", {"q": QUESTION}), ("/search", {"q": QUESTION, "retriever": "bm25"}),
                              ("/ask", {"q": QUESTION, "system": "bm25"}), ("/healthz", {})):
            r = client.get(route, params=params)
            assert r.status_code == 503 and str(vectors) in r.json()["error"], (route, r.text)
    search = ["search", QUESTION, "--preset", "tiny", "--root", store, *[a for s in UNTRAINED for a in ("--set", s)]]
    r = _realm(*search)
    assert r.returncode == 2 and f"error: {vectors}" in " ".join(r.stderr.split()), r.stderr
    blocks = version / "blocks.parquet"
    blocks.write_bytes(np.random.default_rng(0).bytes(blocks.stat().st_size))
    r = _realm(*search)
    assert r.returncode == 2 and f"error: {blocks}" in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr


def _fresh(root: str, dest: Path) -> str:
    """A copy of the trained store without a knowledge corpus: the next add makes its first version."""
    shutil.copytree(root, dest)
    shutil.rmtree(dest / "knowledge", ignore_errors=True)
    return str(dest)


def test_concurrent_first_adds_lose_nothing_and_make_one_first_version(root: str, tmp_path: Path) -> None:
    import threading

    for attempt in range(3):
        store = _fresh(root, tmp_path / f"s{attempt}")
        errors: list[BaseException] = []

        def add(i: int, store: str, notes: Path, errors: list[BaseException]) -> None:
            try:
                add_documents(_resolver(store), [str(notes)])
            except BaseException as e:  # noqa: BLE001  a failure in a thread is the test's
                errors.append(e)

        threads = [threading.Thread(target=add, args=(i, store, _notes(tmp_path / f"n{attempt}-{i}.jsonl", FACT,
                                                                         f"d{i}"), errors)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        corpus = KnowledgeCorpus(Path(store) / "knowledge")
        live = corpus.current()
        assert live is not None
        docs = live.table.column("doc_id").to_pylist()
        # every acknowledged document live, its blocks once; one first version, each later one
        # built on the one before it
        ids = [f"n{attempt}-{i}:d{i}" for i in range(3)]  # each file's name is its documents' source
        assert set(ids) <= set(docs) and len({docs.count(d) for d in ids}) == 1
        firsts = [v for v in corpus.versions() if corpus.version(v).manifest["parent"] is None]
        assert firsts == [1] and corpus.versions() == [1, 2, 3, 4]
        assert [corpus.version(v).manifest["parent"] for v in (2, 3, 4)] == [1, 2, 3]
        assert not list((Path(store) / "knowledge").glob(".tmp-*"))


def test_a_rollback_waits_for_an_add_in_flight(root: str, tmp_path: Path) -> None:
    import threading

    store = _fresh(root, tmp_path / "s")
    add_documents(_resolver(store), [str(_notes(tmp_path / "a.jsonl", FACT, "a"))])  # versions 1 and 2
    corpus = KnowledgeCorpus(Path(store) / "knowledge")
    rollback = threading.Thread(target=corpus.set_current, args=(1,))
    seen: list[bool] = []

    def log(line: str) -> None:  # said with the add's lock held
        if "to cut and embed" in line and not rollback.is_alive() and not seen:
            rollback.start()
            rollback.join(2.0)
            seen.append(rollback.is_alive())  # still waiting for the add's lock

    added = add_documents(_resolver(store), [str(_notes(tmp_path / "b.jsonl", FACT, "b"))], log=log)
    rollback.join()
    assert seen == [True] and (added.previous, added.version) == (2, 3)
    assert corpus.current_number() == 1  # the rollback came after the add, as it was asked after it


def test_a_dead_writers_temp_folder_is_removed_by_the_next(root: str, tmp_path: Path) -> None:
    store = _fresh(root, tmp_path / "s")
    add_documents(_resolver(store), [str(_notes(tmp_path / "a.jsonl", FACT, "a"))])
    left = Path(store) / "knowledge" / ".tmp-v00000003-deadbeef"
    left.mkdir()
    (left / "blocks.parquet").write_bytes(b"half")
    add_documents(_resolver(store), [str(_notes(tmp_path / "b.jsonl", FACT, "b"))])
    assert not left.exists() and KnowledgeCorpus(Path(store) / "knowledge").current_number() == 3


def test_verify_checks_knowledge_versions_beside_the_artifacts(root: str, tmp_path: Path) -> None:
    store = _fresh(root, tmp_path / "s")
    add_documents(_resolver(store), [str(_notes(tmp_path / "a.jsonl", FACT, "a"))])

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "flows.cli", "verify", "--root", store],
                              capture_output=True, text=True, timeout=600)

    ok = verify()
    assert ok.returncode == 0 and "every artifact matches its manifest" in ok.stdout, ok.stdout + ok.stderr
    vectors = next((Path(store) / "knowledge" / "v00000002").glob("vectors-*.npy"))
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0xFF
    vectors.write_bytes(bytes(data))
    bad = verify()
    assert bad.returncode == 2 and f"{vectors}" in bad.stderr and "sha256" in bad.stderr
    assert "Traceback" not in bad.stderr


def _live_doc_ids(store: str) -> list[str]:
    current = KnowledgeCorpus(Path(store) / "knowledge").current()
    assert current is not None
    return current.table.column("doc_id").to_pylist()


def test_an_add_racing_a_post_keeps_both(root: str, tmp_path: Path) -> None:
    """`realm add` in one thread and the service's POST /documents in another, on a store with no
    knowledge version yet: both are acknowledged, and each document is live exactly once."""
    import threading

    store = _fresh(root, tmp_path / "s")
    engine = QueryEngine(_resolver(store))
    errors: list[BaseException] = []

    def add() -> None:
        try:
            add_documents(_resolver(store), [str(_notes(tmp_path / "cli.jsonl", FACT, "c1"))])
        except BaseException as e:  # noqa: BLE001  a failure in a thread is the test's
            errors.append(e)

    with TestClient(create_app(engine, allow_add=True), raise_server_exceptions=False, base_url=LOCAL) as client:
        thread = threading.Thread(target=add)
        thread.start()
        r = client.post("/documents", json={"documents": [{"id": "p1", "title": "Posted", "text": FACT}],
                                            "source": "posted"})
        thread.join(600)
    assert r.status_code == 200 and not errors, (r.text, errors)
    ids = _live_doc_ids(store)
    assert ids.count("cli:c1") == len({i for i in ids if i == "cli:c1"}) == 1
    assert sum(1 for i in ids if i.startswith("cli:")) == 1 and sum(1 for i in ids if i.startswith("posted:")) == 1
    assert KnowledgeCorpus(Path(store) / "knowledge").versions()[0] == 1  # one first version


def test_sigterm_stops_an_add_in_flight_and_leaves_nothing(root: str, tmp_path: Path) -> None:
    """The real service, adding a large POST, is sent SIGTERM: it exits within seconds, nothing is
    published, and neither its scratch folder nor a half-written version is left."""
    import os
    import signal
    import threading
    import time

    import httpx

    from flows.qa_service import free_port

    store = tmp_path / "s"
    shutil.copytree(root, store)
    add_documents(_resolver(str(store)), [str(_notes(tmp_path / "seed.jsonl", FACT, "seed"))])
    corpus = KnowledgeCorpus(store / "knowledge")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    port = free_port()
    cmd = [str(Path(sys.executable).with_name("realm")), "serve-qa", "--port", str(port), "--allow-add",
           "--preset", "tiny", "--root", str(store), *[a for s in UNTRAINED for a in ("--set", s)]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(scratch)})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.time() < deadline, "serve-qa did not start"
            time.sleep(0.5)
        versions = corpus.versions()
        words = " ".join(f"word{i}" for i in range(300))
        body = {"documents": [{"id": f"d{i}", "title": f"Doc {i}", "text": f"{i} {words}"} for i in range(3000)]}
        threading.Thread(target=lambda: httpx.post(f"{url}/documents", json=body, timeout=600), daemon=True).start()
        deadline = time.time() + 120
        while not any(scratch.glob("realm-documents-*")):  # the add has begun
            assert time.time() < deadline, "the POST never started its add"
            time.sleep(0.2)
        time.sleep(3)  # into its batches
        assert proc.poll() is None, "the add ended before it could be stopped: make the POST larger"
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.time() - t0 < 20, f"took {time.time() - t0:.1f} s to stop"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not any(scratch.glob("realm-documents-*")), "the request's scratch folder was left"
    assert corpus.versions() == versions and not list(corpus.root.glob(".tmp-*"))
