"""`realm search` and `realm ask`: the query side, on the artifacts of the current config."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flows.cli.common import (
    ConfigFile,
    Overrides,
    Preset,
    Root,
    app,
    errors,
    out,
    resolver,
    write_output,
)
from realm_core.errors import InputError, RealmError, parse_json, unreadable_input
from realm_core.systems import DEFAULT_ASK, choices

Json = Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")]
SystemDir = Annotated[Path | None, typer.Option(
    "--system-dir", help="answer from an exported system (`realm export`) instead of an artifact store")]


def engine_for(system_dir: Path | None, preset: str, config: Path | None, overrides: list[str] | None,
               root: str | None) -> Any:
    """The query side of an exported system's folder, or of the store this config names."""
    if system_dir is not None:
        from realm_core.system_bundle import BundleEngine, query_settings

        return BundleEngine(system_dir, query_settings(system_dir, overrides or []))
    from realm_core.query import QueryEngine

    return QueryEngine(resolver(preset, config, overrides, root))


def read_queries(path: Path) -> list[dict[str, Any]]:
    """One query per line, or JSONL objects with a `question` (and optional `answers`/`answer`)."""
    expected = "a file of queries, one per line or JSONL with a 'question'"
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise unreadable_input(path, expected, e) from None
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputError(path, f"UTF-8 text: {expected}", position=f"byte {e.start}", found="bad bytes") from None
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            obj = parse_json(line, path, "a JSON object", position=f"line {n}")
            if not isinstance(obj, dict) or not isinstance(obj.get("question"), str):
                raise InputError(path, "an object with a string 'question'", position=f"line {n}")
            answers = obj.get("answers", obj.get("answer"))
            if isinstance(answers, str):
                answers = [answers]
            elif answers is None:
                answers = []
            elif not (isinstance(answers, list) and all(isinstance(a, str) for a in answers)):
                raise InputError(path, "'answers' as a string or a list of strings", position=f"line {n}",
                                 found=json.dumps(answers)[:80])
            items.append({"qid": str(obj.get("id", obj.get("qid", n))), "question": obj["question"],
                          "answers": answers})
        else:
            items.append({"qid": str(n), "question": line.strip(), "answers": []})
    if not items:
        raise InputError(path, "at least one query", found="an empty file")
    return items


def _single_or_batch(text: str | None, batch: Path | None, out_file: Path | None, what: str) -> None:
    if (text is None) == (batch is None):
        raise RealmError(f"give one {what} as an argument, or a file of them with --{what}s FILE")
    if batch is not None and out_file is None:
        raise RealmError(f"--{what}s {batch} needs --out FILE for the results (JSONL)")
    if out_file is not None and out_file.is_dir():
        raise RealmError(f"--out {out_file}: expected a file to write, found a directory")


@app.command()
def search(query: Annotated[str | None, typer.Argument(help="the query")] = None,
           retriever: Annotated[str, typer.Option(
               help="index (the current index version, as refresh-index built it), bm25, ict (the warm "
                    "start's encoders) or realm (REALM's encoders)")] = "index",
           k: Annotated[int, typer.Option("-k", help="blocks to return")] = 10,
           queries: Annotated[Path | None, typer.Option(
               "--queries", help="many queries: one per line, or JSONL with 'question'")] = None,
           out_file: Annotated[Path | None, typer.Option("--out", help="JSONL results of --queries")] = None,
           json_out: Json = False, preset: Preset = "demo", config: ConfigFile = None,
           overrides: Overrides = None, root: Root = None, system_dir: SystemDir = None) -> None:
    """The top-k [bold]blocks[/] for a query: rank, score, block id, title and a snippet. The index (default) and the dense retrievers embed the query with the query encoder that belongs to the document encoder of the blocks' vectors.

    Examples: realm search "who wrote the origin of species" --retriever ict -k 5
              realm search --queries questions.txt --out hits.jsonl --retriever bm25
              realm search "capital of Quarnia" --system-dir exported/bm25"""
    with errors():
        _single_or_batch(query, queries, out_file, "query")
        engine = engine_for(system_dir, preset, config, overrides, root)
        if queries is not None and out_file is not None:
            items = read_queries(queries)
            hits = engine.search([q["question"] for q in items], retriever, k)
            write_output(out_file, (json.dumps({"qid": item["qid"], "query": item["question"], "retriever": retriever,
                                                "hits": [asdict(h) for h in found]})
                                    for item, found in zip(items, hits, strict=True)))
            out.print(f"{len(items):,} queries -> {out_file}")
            return
        assert query is not None
        found = engine.search([query], retriever, k)[0]
        if json_out:
            out.print_json(json.dumps({"query": query, "retriever": retriever, "k": k,
                                       "hits": [asdict(h) for h in found]}))
            return
        table = Table(title=f"{retriever}: {query}")
        for col in ("rank", "score", "block", "title", "snippet"):
            table.add_column(col, overflow="fold")
        for h in found:
            table.add_row(str(h.rank), f"{h.score:.3f}", str(h.block_id), h.title, h.snippet)
        out.print(table)


def prediction_row(item: dict[str, Any], answer: Any) -> dict[str, Any]:
    """An `openqa_predictions` row (correct and F1 when the input gave answers)."""
    from realm_core.answers import exact_match, f1_score

    answers = item["answers"]
    return {"dataset": "ask", "split": None, "system": answer.system, "qid": item["qid"],
            "question": answer.question, "answers": answers, "predicted": answer.answer,
            "score": answer.probability, "correct": exact_match(answer.answer, answers) if answers else None,
            "answer_retrieved": None, "answerable": None, "block_ids": answer.block_ids,
            "answer_rank": None, "answer_read": None, "f1": f1_score(answer.answer, answers) if answers else None,
            "block_id": answer.block_id, "char_start": answer.char_start, "char_end": answer.char_end}


def questions_summary(rows: list[dict[str, Any]], why: str, out_file: Path) -> str:
    """One line for `--questions`: how many were answered, by which system and why, and exact
    match and F1 over the questions that came with answers."""
    line = f"{len(rows):,} question{'s' if len(rows) != 1 else ''} answered by {why}"
    scored = [r for r in rows if r["correct"] is not None]
    if scored:
        em = 100 * sum(bool(r["correct"]) for r in scored) / len(scored)
        f1 = 100 * sum(float(r["f1"]) for r in scored) / len(scored)
        line += f"; EM {em:.1f}, F1 {f1:.1f} on the {len(scored):,} given with answers"
    return f"{line}; predictions in {out_file}"


@app.command()
def ask(question: Annotated[str | None, typer.Argument(help="the question")] = None,
        system: Annotated[str | None, typer.Option(
            help=f"{choices()} [default: the best by SQuAD-open dev EM in the newest evaluation, else "
                 f"{DEFAULT_ASK.key}]")] = None,
        questions: Annotated[Path | None, typer.Option(
            "--questions", help="many questions: one per line, or JSONL with 'question' and optionally "
                                "'answers' (a string or a list of strings)")] = None,
        out_file: Annotated[Path | None, typer.Option("--out", help="JSONL predictions of --questions")] = None,
        json_out: Json = False, preset: Preset = "demo", config: ConfigFile = None,
        overrides: Overrides = None, root: Root = None, system_dir: SystemDir = None) -> None:
    """The [bold]answer[/] of a fine-tuned open-QA system: the string, its probability, the block it was read from (title, id, character offsets in the block's text) and the next candidates. Fine-tunes the system first if it is not cached.

    Examples: realm ask "what does the kidney filter" --system bm25
              realm ask --questions my_questions.jsonl --out predictions.jsonl
              realm ask "what is the capital of Quarnia" --system-dir exported/ict"""
    with errors():
        _single_or_batch(question, questions, out_file, "question")
        engine = engine_for(system_dir, preset, config, overrides, root)
        from realm_core.systems import SYSTEM_NAMES

        key, why = (system, f"{SYSTEM_NAMES.get(system, system)}, asked for with --system {system}") if system \
            else engine.default_system()
        if questions is not None and out_file is not None:
            items = read_queries(questions)
            answers = engine.ask([q["question"] for q in items], key)
            rows = [prediction_row(item, a) for item, a in zip(items, answers, strict=True)]
            write_output(out_file, (json.dumps(r) for r in rows))
            out.print(questions_summary(rows, why, out_file))
            return
        assert question is not None
        a = engine.ask([question], key)[0]
        if json_out:
            out.print_json(json.dumps(asdict(a) | {"system_key": key, "system_choice": why}))
            return
        out.print(f"system: {why}")
        out.print(f"answer: {a.answer or '(none)'}   p = {a.probability:.3f}")
        if a.block_id is not None and a.block_text is not None:
            out.print(f"from block {a.block_id} ({a.title}), characters {a.char_start}-{a.char_end}:")
            lo, hi = max(0, a.char_start - 160), min(len(a.block_text), a.char_end + 160)
            out.print(f"  ...{a.block_text[lo:a.char_start]}[{a.block_text[a.char_start:a.char_end]}]"
                      f"{a.block_text[a.char_end:hi]}...")
        for c in a.candidates:
            out.print(f"  also: {c['answer']}   p = {c['probability']:.3f}")


@app.command("serve-qa")
def serve_qa(port: Annotated[int, typer.Option(help="TCP port")] = 8000,
             host: Annotated[str, typer.Option(help="address to listen on; anything but loopback exposes "
                                                    "the service to the network")] = "127.0.0.1",
             preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, system_dir: SystemDir = None,
             api_docs: Annotated[bool, typer.Option(help="serve FastAPI's /docs and /openapi.json (its Swagger UI "
                                                         "loads scripts from a CDN)")] = False,
             allow_add: Annotated[bool, typer.Option(
                 "--allow-add", help="accept POST /documents: grow the knowledge corpus in this process, as "
                                     "`realm add` does, without a command's start-up")] = False) -> None:
    """A local [bold]QA service[/] on the current artifacts: GET /search?q=&k=, /ask?q=&system=, /healthz, and a page at / to ask and read the evidence. Models load once; a new index version (the nightly refresh-index) or knowledge version (`realm add`) is picked up without a restart. With --allow-add, POST /documents (JSON) adds documents in the service itself.

    Examples: realm serve-qa --port 8000, then open http://127.0.0.1:8000/
              realm serve-qa --allow-add, then
              curl -H 'Content-Type: application/json' -d '{"documents": [{"id": "n1", "title": "Notes", "text": "..."}], "source": "notes"}' http://127.0.0.1:8000/documents"""
    from flows.qa_service import LOOPBACK_HOSTS, create_app, run_server

    with errors():
        if not 1 <= port <= 65535:
            raise RealmError(f"--port {port}: expected a TCP port, 1 to 65535")
        hosts: tuple[str, ...] = LOOPBACK_HOSTS
        if host not in LOOPBACK_HOSTS:
            out.print(f"warning: listening on {host}: anyone who can reach this machine can query the service")
            hosts = (*LOOPBACK_HOSTS, host) if host not in ("0.0.0.0", "::") else ("*",)
        engine = engine_for(system_dir, preset, config, overrides, root)
        engine.blocks  # noqa: B018  (load the blocks before the first request)
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            try:
                probe.bind((host, port))
            except OSError as e:
                raise RealmError(f"--host {host} --port {port}: cannot listen there "
                                 f"({e.strerror or type(e).__name__})") from None
        served = engine.describe().get("artifact_root") or engine.describe().get("system_dir")
        out.print(f"realm QA service on http://{host}:{port}/ (serving {served})")
        if allow_add:
            out.print("POST /documents is on: a local client can grow the knowledge corpus")
        run_server(create_app(engine, hosts=hosts, api_docs=api_docs, allow_add=allow_add), host, port)
