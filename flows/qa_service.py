"""`realm serve-qa`: a local HTTP service over the query side (realm_core/query.py).

GET /search?q=&k=&retriever=   the top-k blocks (default: the current index version)
GET /ask?q=&system=            a fine-tuned system's answer, its block and offsets
GET /healthz                   what is loaded and served (index version, its files checked), or 503
GET /                          one page (no build step, no CDN) to ask and read the evidence

Models load once and stay loaded. One model call runs at a time (a lock: torch already uses
every core for one call on a small machine, so parallel calls would only queue inside torch);
requests wait their turn rather than fail. Each request checks `index/CURRENT`: when the nightly
refresh-index has moved it on, the new version is loaded and swapped in; a request already
searching keeps the old one to its end. Every error, whatever its status, is a JSON object
with one field, `error`: bad input a 4xx, a damaged artifact a 503, never a plain-text 500.

Meant for the machine it runs on: requests whose Host header is not a loopback name (or the
address it was told to listen on) are refused (a DNS-rebinding page cannot reach it), and
FastAPI's /docs and /openapi.json are off unless asked for (`api_docs`: their Swagger UI loads
its scripts from a CDN).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from realm_core.errors import (
    CorruptArtifactError,
    MissingArtifactError,
    MissingIndexError,
    RealmError,
)
from realm_core.query import Answerer

PAGE = Path(__file__).with_name("qa_page.html")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def create_app(engine: Answerer, *, hosts: tuple[str, ...] = LOOPBACK_HOSTS, api_docs: bool = False) -> FastAPI:
    """The service over `engine`; `hosts` the Host header names it answers to."""
    app = FastAPI(title="realm", description="search and ask over the current REALM artifacts",
                  docs_url="/docs" if api_docs else None, redoc_url="/redoc" if api_docs else None,
                  openapi_url="/openapi.json" if api_docs else None)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    lock = threading.Lock()
    started = time.time()

    def status_of(e: Exception) -> int:
        if isinstance(e, MissingIndexError | MissingArtifactError):
            return 404
        if isinstance(e, CorruptArtifactError | OSError):
            return 503  # the artifacts, not the request, are at fault
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
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"}, status_code=422)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        base = {**engine.describe(),
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

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    return app


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
