"""`realm serve-qa`'s HTTP API through FastAPI's TestClient on the tiny preset's artifacts: every
endpoint, every bad input as a 4xx with a JSON error, and an index swap under a stream of
requests; then the page in a real browser (Debian's chromium) against `realm serve-qa` itself."""

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flows.qa_service import create_app, serving
from realm_core.config import load_config
from realm_core.graph.resolver import Resolver
from realm_core.query import QueryEngine
from realm_core.store.artifacts import ArtifactStore
from tests.conftest import TinyUpstream
from tests.corruption import truncate

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
UNTRAINED = ["embed.encoder_from=config"]  # the first index: the bundled encoder as it is (step 0)
LOCAL = "http://127.0.0.1"  # the Host a browser on this machine sends


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_upstream: TinyUpstream) -> str:
    """BM25's fine-tuned system and a first index with the untrained encoder (step 0), in a copy
    of the session's tiny upstream (its ICT a cache hit when the index moves to it)."""
    root = str(tmp_path_factory.mktemp("qa") / "art")
    shutil.copytree(tiny_upstream[0], root)
    stages = Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(root))
    stages.run("finetune_bm25")
    stages.run("index")
    return root


@pytest.fixture(scope="module")
def client(root: str) -> Iterator[TestClient]:
    engine = QueryEngine(Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(root)))
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as c:
        yield c


def test_health_search_and_ask(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["index_version"] == 0 and health["uptime_s"] >= 0
    r = client.get("/search", params={"q": "Warsaw capital Polish-Lithuanian Commonwealth", "k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["retriever"] == "index" and body["index_version"] == 0 and len(body["hits"]) == 3
    assert set(body["hits"][0]) == {"rank", "block_id", "score", "title", "snippet"}
    bm25 = client.get("/search", params={"q": "Warsaw capital Polish-Lithuanian Commonwealth", "k": 3,
                                         "retriever": "bm25"}).json()
    assert bm25["hits"][0]["title"] == "Warsaw"
    r = client.get("/ask", params={"q": "What was Warsaw the capital of until 1796?"})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["system_key"] == "bm25" and "no open-QA evaluation" in a["system_choice"]
    assert a["block_text"][a["char_start"]:a["char_end"]] == a["answer"]
    assert [b["block_id"] for b in a["blocks"]] == a["block_ids"] and a["block_id"] in a["block_ids"]
    assert "search:index" in client.get("/healthz").json()["loaded"]


def test_the_page_is_served_whole(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert 'id="q"' in r.text and "/ask?q=" in r.text and "http" not in r.text.replace("http://127", "")


@pytest.mark.parametrize(("path", "params", "status", "message"), [
    ("/search", {"q": ""}, 400, "empty query"),
    ("/search", {"q": "x" * 1001}, 400, "max_query_chars"),
    ("/search", {"q": "x", "k": 0}, 400, "k=0"),
    ("/search", {"q": "x", "k": 101}, 400, "k=101"),
    ("/search", {"q": "x", "k": "ten"}, 422, "query.k"),
    ("/search", {"q": "x", "retriever": "tfidf"}, 400, "retriever 'tfidf'"),
    ("/ask", {"q": " "}, 400, "empty question"),
    ("/ask", {"q": "x", "system": "t5"}, 400, "system 't5'"),
    ("/search", {"q": "???"}, 400, "expected a word or a number"),
    ("/ask", {"q": "\u200b"}, 400, "empty question"),
    ("/nowhere", {}, 404, "Not Found"),
    ("/docs", {}, 404, "Not Found"),        # no Swagger UI (CDN scripts) unless --api-docs
    ("/openapi.json", {}, 404, "Not Found"),
])
def test_bad_input_is_a_4xx_with_a_json_error(client: TestClient, path: str, params: dict[str, object],
                                             status: int, message: str) -> None:
    r = client.get(path, params=params)
    assert r.status_code == status and message in r.json()["error"], r.text


def test_every_error_has_one_shape_and_foreign_hosts_are_refused(client: TestClient) -> None:
    r = client.post("/search", params={"q": "x"})
    assert r.status_code == 405 and set(r.json()) == {"error"}
    # a page on another site that rebinds its name to 127.0.0.1 sends its own Host
    r = client.get("/search", params={"q": "Warsaw"}, headers={"host": "attacker.example"})
    assert r.status_code == 400
    assert client.get("/healthz", headers={"host": "localhost:8000"}).status_code == 200


def test_no_index_yet_is_a_404_not_a_500(tmp_path: Path, shared_data: Path) -> None:
    engine = QueryEngine(Resolver(load_config("tiny"), ArtifactStore(str(tmp_path / "empty"))))
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as c:
        r = c.get("/search", params={"q": "Warsaw"})
        assert r.status_code == 404 and "no index built yet" in r.json()["error"]
        assert c.get("/healthz").json()["index_version"] is None
        # the query side never computes a stage: nothing was ingested, so nothing is answered
        r = c.get("/ask", params={"q": "Where is Warsaw?", "system": "bm25"})
        assert r.status_code == 404 and "stage 'ingest' has not run" in r.json()["error"], r.text
    assert not (tmp_path / "empty" / "documents").exists()


@pytest.fixture
def served(root: str) -> Iterator[str]:
    """`realm serve-qa` as a user starts it, on a free loopback port; stopped (and reaped) after."""
    with serving(["--preset", "tiny", "--root", root, *(a for o in UNTRAINED for a in ("--set", o))],
                 timeout=180) as url:
        yield url


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: install Debian's package (apt-get install chromium) "
                                              "to run the page in a real browser")
def test_the_page_answers_in_a_real_browser(served: str) -> None:
    """Headless Chromium (the system's, no browser download) opens the page, types a question,
    submits it, and reads the answer, its highlighted evidence and the retrieved blocks."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(served)
            page.wait_for_function("document.getElementById('version').textContent !== '…'")
            assert page.inner_text("#version") == "0"
            page.fill("#q", "What was Warsaw the capital of until 1796?")
            page.press("#q", "Enter")
            page.wait_for_selector("#highlight, #error", timeout=120_000)
            assert page.query_selector("#error") is None
            answer, highlight = page.inner_text("#answer"), page.inner_text("#highlight")
            assert answer and answer == highlight
            support = page.inner_text("#support .title")
            titles = page.locator("#blocks .title").all_inner_texts()
            assert len(titles) == load_config("tiny").finetune.top_k and any(t.split(". ", 1)[1].split(" (block")[0] in support for t in titles)
            assert "BM25 + reader" in support  # the default system, and why, are on the page
            page.fill("#q", "")
            page.press("#q", "Enter")
            page.wait_for_selector("#error")
            assert "empty question" in page.inner_text("#error")
        finally:
            browser.close()


def test_a_new_index_version_is_swapped_in_while_requests_stream(client: TestClient, root: str) -> None:
    """The nightly refresh-index moves CURRENT on (the ICT encoder: step 4) while a client keeps
    searching: no request fails, and the version served moves forward without a restart."""
    statuses: list[int] = []
    versions: list[int] = []
    done = threading.Event()

    def stream() -> None:
        while not done.is_set():
            r = client.get("/search", params={"q": "Normans in Italy", "k": 2})
            statuses.append(r.status_code)
            if r.status_code == 200:
                versions.append(r.json()["index_version"])

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        Resolver(load_config("tiny"), ArtifactStore(root)).run("index")  # embeds with ICT (4 steps), builds v4
    finally:
        done.set()
        worker.join(timeout=120)
    client.get("/search", params={"q": "Normans", "k": 1})
    assert statuses and set(statuses) == {200}
    assert client.get("/healthz").json()["index_version"] == 4
    assert client.get("/search", params={"q": "Normans", "k": 1}).json()["index_version"] == 4
    assert versions == sorted(versions) and versions[0] == 0


def test_serve_qa_on_an_empty_root_exits_with_the_reason(tmp_path: Path) -> None:
    """No artifacts to serve: serve-qa stops with its error, and `serving` reports it rather than
    waiting for a /healthz that will never answer."""
    with pytest.raises(RuntimeError, match=r"serve-qa exited with 2: .*error: stage 'ingest' has not run"), \
            serving(["--preset", "tiny", "--root", str(tmp_path / "empty")], timeout=120):
        pass


def test_healthz_checks_what_it_serves_and_fails_on_a_damaged_index(root: str, tmp_path: Path) -> None:
    """/healthz names the index version, its blocks and encoder, what is loaded, and checks their
    files as a cache hit does; a damaged index file is a 503 naming it (searches too), not "ok"."""
    copy = str(tmp_path / "art")
    shutil.copytree(root, copy)
    engine = QueryEngine(Resolver(load_config("tiny", overrides=UNTRAINED), ArtifactStore(copy)))
    with TestClient(create_app(engine), raise_server_exceptions=False, base_url=LOCAL) as c:
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["index_blocks"] > 0 and health["bytes_checked"] > 0
        assert "search:index" in health["loaded"] and health["verify"] == "content"
        version = Path(copy) / "index" / f"v{health['index_version']:08d}"
        truncate(version / "index.faiss")
        r = c.get("/healthz")
        assert r.status_code == 503 and "index.faiss" in r.json()["error"] and r.json()["status"] == "unavailable"
        # a fine-tuned reader whose weights went: its system is refused, as JSON, naming the file
        model = next(p for p in (Path(copy) / "openqa_model").iterdir() if (p / "reader").is_dir())
        (model / "reader" / "model.safetensors").unlink()
        r = c.get("/ask", params={"q": "What was Warsaw the capital of until 1796?", "system": "bm25"})
        assert r.status_code == 503 and "model.safetensors: missing" in r.json()["error"], r.text
        assert "stage 'finetune_bm25' is damaged" in r.json()["error"]


def test_a_copied_then_moved_store_serves_the_same_answers_with_its_own_files(root: str, tmp_path: Path) -> None:
    """An index whose document encoder lives in the store (ICT's): cp -a, then mv, then the
    original deleted; search and ask answer as before, the query encoder loaded from the copy."""
    original = tmp_path / "original"
    shutil.copytree(root, original)
    cfg = load_config("tiny")
    Resolver(cfg, ArtifactStore(original)).run("index")  # ICT's encoders: v4, named by store path

    def answers(where: Path) -> tuple[list[list[tuple[int, float]]], list[tuple[str, int | None]], str]:
        engine = QueryEngine(Resolver(cfg, ArtifactStore(where)))
        hits = engine.search(["Warsaw capital of the Polish-Lithuanian Commonwealth", "Normans in Italy"], k=5)
        asked = engine.ask(["What was Warsaw the capital of until 1796?"], "bm25")
        return ([[(h.block_id, round(h.score, 4)) for h in q] for q in hits],
                [(a.answer, a.block_id) for a in asked], engine.current_index().encoder_dir)

    before = answers(original)
    assert before[2].startswith(str(original))
    subprocess.run(["cp", "-a", str(original), str(tmp_path / "copy")], check=True)
    (tmp_path / "copy").rename(tmp_path / "moved")
    shutil.rmtree(original)
    after = answers(tmp_path / "moved")
    assert after[:2] == before[:2] and after[2].startswith(str(tmp_path / "moved"))
