"""`realm serve-qa`: a local HTTP service over the query side (realm_core/query.py).

GET /search?q=&k=&retriever=   the top-k blocks (default: the current index version)
GET /ask?q=&system=            a fine-tuned system's answer, its block and offsets
GET /healthz                   what is loaded and served (index version, its files checked), or 503
GET /                          one page (no build step, no CDN) to ask and read the evidence
POST /documents                with `--allow-add` only: grow the knowledge corpus (`realm add`) in
                               this process, JSON {"documents": [{"id", "title", "text", "source"?}],
                               "source": NAME, "remove": [DOC_ID], "remove_source": [NAME],
                               "reembed": false}; answers with the new version and its counts

Models load once and stay loaded. One model call runs at a time (a lock: torch already uses
every core for one call on a small machine, so parallel calls would only queue inside torch);
requests wait their turn rather than fail. Each request checks `index/CURRENT`: when the nightly
refresh-index has moved it on, the new version is loaded and swapped in; a request already
searching keeps the old one to its end. Every error, whatever its status, is a JSON object
with one field, `error`: bad input a 4xx, a damaged artifact a 503, never a plain-text 500.

An add runs beside the queries, one add at a time, with its own encoders, reading and
embedding its documents in bounded batches (`realm add`'s path): queries go on answering from
the live version until the new one is published, then answer from it. A body over
`query.max_add_bytes` or a document over `query.max_document_chars` is a 413. On SIGTERM an
add in flight stops at its next batch (nothing published, its temp files removed) and the
service exits.

Meant for the machine it runs on: requests whose Host header is not a loopback name (or the
address it was told to listen on) are refused (a DNS-rebinding page cannot reach it), and
FastAPI's /docs and /openapi.json are off unless asked for (`api_docs`: their Swagger UI loads
its scripts from a CDN). POST /documents is off unless asked for (`allow_add`) and takes only
`Content-Type: application/json`, which a page on another origin cannot send without a CORS
preflight this service never grants: a web page the user visits cannot add documents.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from realm_core.errors import (
    CorruptArtifactError,
    InputError,
    MissingArtifactError,
    MissingIndexError,
    QueryError,
    RealmError,
)
from realm_core.knowledge.add import Added
from realm_core.knowledge.update import Stopped
from realm_core.query import Answerer
from realm_core.system_bundle import add_to_engine

PAGE = Path(__file__).with_name("qa_page.html")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class NewDocument(BaseModel):
    """One document of POST /documents, as a `realm add` JSONL line holds it."""

    id: str = Field(min_length=1, description="its id within its source: a known id replaces that document")
    title: str = ""
    text: str = Field(min_length=1)
    source: str | None = Field(None, min_length=1, description="its source name (default: the request's)")


class DocumentsRequest(BaseModel):
    """The body of POST /documents: what `realm add` takes on its command line."""

    model_config = {"extra": "forbid"}
    documents: list[NewDocument] = []
    source: str = Field("added", min_length=1, description="the documents' source name (`realm add --name`)")
    remove: list[str] = Field([], description="doc ids to remove (`--remove`)")
    remove_source: list[str] = Field([], description="sources to remove (`--remove-source`)")
    reembed: bool = Field(False, description="then embed every block again: a full re-index (`--reembed`)")


Adder = Callable[..., Added]  # (paths, kind, names, remove_docs, remove_sources, reembed_all=, stop=) -> Added


def grow_knowledge(add: Adder, body: DocumentsRequest, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """`realm add` of the request's documents by `add` (`add_to_engine` on the served engine):
    each source's documents written as a JSONL file of a scratch folder, read by the same reader
    (a bad document is the request's 400, the live version untouched); `stop` is asked between
    batches (the folder is removed whether the add ends, fails or stops)."""
    if not (body.documents or body.remove or body.remove_source or body.reembed):
        raise QueryError("nothing to do: give documents, remove, remove_source or reembed")
    # what is not added is counted and named, as ingest counts it: a second document with an id
    # already given in its source (the first wins), and a text with nothing but white space
    by_source: dict[str, list[NewDocument]] = {}
    dropped: dict[str, list[str]] = {"duplicate_id": [], "empty_text": []}
    for doc in body.documents:
        source = doc.source or body.source
        if not doc.text.strip():
            dropped["empty_text"].append(f"{source}:{doc.id}")
        elif any(d.id == doc.id for d in by_source.get(source, [])):
            dropped["duplicate_id"].append(f"{source}:{doc.id}")
        else:
            by_source.setdefault(source, []).append(doc)
    if body.documents and not by_source and not (body.remove or body.remove_source or body.reembed):
        raise QueryError(f"no document to add: {len(dropped['empty_text'])} with an empty text, "
                         f"{len(dropped['duplicate_id'])} repeating an id ({', '.join(sum(dropped.values(), []))[:200]})")
    with tempfile.TemporaryDirectory(prefix="realm-documents-") as tmp:
        paths = []
        for i, docs in enumerate(by_source.values()):
            path = Path(tmp, f"{i}.jsonl")
            path.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs),
                            encoding="utf-8")
            paths.append(str(path))
        try:
            added = add(paths, "jsonl", list(by_source), body.remove, body.remove_source, reembed_all=body.reembed,
                        stop=stop)
        except InputError as e:
            if not e.path.startswith(tmp):
                raise
            source = list(by_source)[int(Path(e.path).stem)]
            line = e.position.replace("line ", "") if e.position else None
            raise InputError(f"the request's documents of source {source!r}", e.expected, found=e.found,
                             position=f"document {line}" if line else None) from None
    counts = {**added.counts, "documents_dropped_duplicate_id": len(dropped["duplicate_id"]),
              "documents_dropped_empty_text": len(dropped["empty_text"])}
    return {"version": added.version, "previous_version": added.previous, "counts": counts,
            "dropped": {k: v for k, v in dropped.items() if v}, "seconds": round(added.seconds, 3),
            "encoders": len(added.encoders), "summary": added.summary()}


def create_app(engine: Answerer, *, hosts: tuple[str, ...] = LOOPBACK_HOSTS, api_docs: bool = False,
               allow_add: bool = False, add: Adder | None = None) -> FastAPI:
    """The service over `engine`; `hosts` the Host header names it answers to; `allow_add`
    opens POST /documents, which adds with `add` (default: `add_to_engine` on `engine`).
    `app.state.stopping`, once set (`run_server` sets it on SIGTERM), stops an add in flight."""
    stopping = threading.Event()
    adder: Adder = add or (lambda *args, **kwargs: add_to_engine(engine, *args, **kwargs))
    app = FastAPI(title="realm", description="search and ask over the current REALM artifacts",
                  docs_url="/docs" if api_docs else None, redoc_url="/redoc" if api_docs else None,
                  openapi_url="/openapi.json" if api_docs else None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    app.state.stopping = stopping
    lock = threading.Lock()  # one model call at a time
    adding = threading.Lock()  # one add at a time (each holds a batch of blocks and its encoders)
    limits = engine.cfg.query
    started = time.time()

    def status_of(e: Exception) -> int:
        if isinstance(e, MissingIndexError | MissingArtifactError):
            return 404
        if isinstance(e, CorruptArtifactError | OSError | Stopped):
            return 503  # the artifacts or the service, not the request, are at fault
        return 400

    @app.exception_handler(RealmError)
    def bad_request(_: Request, e: RealmError) -> JSONResponse:
        return JSONResponse({"error": str(e)}, status_code=status_of(e))

    @app.exception_handler(OSError)
    def unreadable(_: Request, e: OSError) -> JSONResponse:
        return JSONResponse({"error": f"{e.filename or 'an artifact'}: cannot be read "
                                      f"({e.strerror or type(e).__name__})"}, status_code=503)

    @app.exception_handler(HTTPException)
    def http_error(_: Request, e: HTTPException) -> JSONResponse:  # 404, 405: the same shape as the rest
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    def internal(_: Request, e: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error: {type(e).__name__}: {e}"}, status_code=500)

    @app.exception_handler(RequestValidationError)
    def bad_parameter(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"}, status_code=422)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        base = {**engine.describe(), "accepts_documents": allow_add,
                "uptime_s": round(time.time() - started, 1)}
        try:
            with lock:
                served = engine.health()
        except (RealmError, OSError) as e:
            if isinstance(e, MissingIndexError):  # nothing built yet: up, with nothing to search
                return JSONResponse({"status": "ok", "index_version": None, "loaded": [], **base})
            return JSONResponse({"status": "unavailable", "error": str(e), **base}, status_code=503)
        return JSONResponse({"status": "ok", **served, **base})

    @app.get("/search")
    def search(q: str = "", k: int = Query(10), retriever: str = "index") -> dict[str, Any]:
        with lock:
            hits = engine.search([q], retriever, k)[0]
            version = engine.index_version(retriever)
        return {"query": q, "retriever": retriever, "k": k, "index_version": version,
                "hits": [asdict(h) for h in hits]}

    @app.get("/ask")
    def ask(q: str = "", system: str | None = None) -> dict[str, Any]:
        with lock:
            key, why = (system, "asked for") if system else engine.default_system()
            answer = engine.ask([q], key)[0]
        snippet = engine.cfg.query.snippet_chars
        read = [{"block_id": z, "title": engine.blocks.titles[z], "snippet": engine.blocks.texts[z][:snippet]}
                for z in answer.block_ids]
        return asdict(answer) | {"system_key": key, "system_choice": why, "blocks": read}

    @app.post("/documents")
    async def documents(request: Request) -> dict[str, Any]:
        if not allow_add:
            raise HTTPException(403, "adding documents is off here: start the service with "
                                     "`realm serve-qa --allow-add`, or run `realm add`")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise HTTPException(415, f"content-type {content_type or 'none'}: expected application/json")
        raw = bytearray()
        async for chunk in request.stream():  # read to the limit, never past it
            raw += chunk
            if len(raw) > limits.max_add_bytes:
                raise HTTPException(413, f"body over query.max_add_bytes={limits.max_add_bytes:,} bytes: send the "
                                         "documents in parts")
        try:
            body = DocumentsRequest.model_validate_json(raw)
        except ValidationError as e:  # answered as FastAPI's own validation errors are
            raise RequestValidationError(e.errors()) from None
        del raw
        for doc in body.documents:
            if len(doc.text) > limits.max_document_chars:
                raise HTTPException(413, f"document {doc.id!r}: {len(doc.text):,} characters, over "
                                         f"query.max_document_chars={limits.max_document_chars:,}: split it")

        def add() -> dict[str, Any]:
            with adding:  # queries go on meanwhile: the engine follows the new version once published
                return grow_knowledge(adder, body, stopping.is_set)

        return await run_in_threadpool(add)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    return app


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve `app` until SIGINT or SIGTERM; either also sets `app.state.stopping`, so that an add
    in flight stops at its next batch instead of holding the shutdown until it ends."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.stopping.set()
            super().handle_exit(sig, frame)

    Server(uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=30)).run()


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(args: list[str], timeout: float = 300.0, log: IO[Any] | None = None) -> Iterator[str]:
    """`realm serve-qa ARGS` in its own process (its own session) on a free loopback port, as a
    user starts it; yields its URL once /healthz answers, then terminates it (killed after 15 s)
    and reaps it. A service that exits or stays silent for `timeout` seconds is a RuntimeError
    with the end of its output."""
    import tempfile

    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = log if log is not None else tempfile.TemporaryFile("w+")  # noqa: SIM115
    cmd = [str(Path(sys.executable).with_name("realm")), "serve-qa", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def tail() -> str:
        if log is not None:
            return f"see {getattr(log, 'name', 'its log')}"
        out.seek(0)
        return out.read()[-4000:]

    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve-qa exited with {proc.returncode}: {tail()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"serve-qa did not answer /healthz in {timeout:.0f} s: {tail()}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is None:
            out.close()
