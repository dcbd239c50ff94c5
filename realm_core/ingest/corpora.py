"""Readers of the non-Wikipedia corpora into document rows: SQuAD JSON (an article's paragraphs
make one document), DPR passages (psgs_w100 TSV, and the `*_ctxs` of DPR training JSON), JSONL.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from realm_core.errors import InputError, parse_json, unreadable_input

Document = dict[str, Any]
DPR_CTX_KEYS = ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs")


def _doc(source: str, native_id: object, title: str, text: str, path: Path) -> Document:
    return {"doc_id": f"{source}:{native_id}", "title": title, "text": text, "source": source,
            "source_file": path.name, "page_id": None, "revision_id": None}


def _load_json(path: Path, what: str) -> Any:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise unreadable_input(path, what, e) from None
    return parse_json(data, path, what)


def _require(obj: Any, key: str, path: Path, position: str, expected_type: type) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(path, f"key {key!r}", position=position, found="it missing")
    value = obj[key]
    if not isinstance(value, expected_type):
        raise InputError(path, f"{key!r} to be {expected_type.__name__}", position=position,
                         found=type(value).__name__)
    return value


def read_squad(path: Path, source: str) -> Iterator[Document]:
    data = _require(_load_json(path, "SQuAD JSON"), "data", path, "top level", list)
    if not data:
        raise InputError(path, "at least one article in 'data'", found="an empty list")
    for i, article in enumerate(data):
        title = _require(article, "title", path, f"data[{i}]", str).replace("_", " ")
        paragraphs = _require(article, "paragraphs", path, f"data[{i}]", list)
        texts = [_require(p, "context", path, f"data[{i}].paragraphs[{j}]", str).strip()
                 for j, p in enumerate(paragraphs)]
        yield _doc(source, title.replace(" ", "_"), title, "\n\n".join(t for t in texts if t), path)


def read_dpr_json(path: Path, source: str) -> Iterator[Document]:
    """Passages of DPR retriever-training JSON, each once (deduplicated by passage id)."""
    items = _load_json(path, "DPR training JSON (a list of questions)")
    if not isinstance(items, list) or not items:
        raise InputError(path, "a non-empty JSON list of DPR questions", found=type(items).__name__)
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not any(k in item for k in DPR_CTX_KEYS):
            raise InputError(path, f"one of {DPR_CTX_KEYS}", position=f"item {i}", found="none")
        for key in DPR_CTX_KEYS:
            for j, ctx in enumerate(item.get(key, [])):
                pos = f"item {i}.{key}[{j}]"
                text = _require(ctx, "text", path, pos, str)
                title = _require(ctx, "title", path, pos, str)
                pid = str(ctx.get("passage_id") or ctx.get("psg_id") or ctx.get("id") or "")
                if not pid:
                    raise InputError(path, "'passage_id' (or 'psg_id')", position=pos, found="none")
                if pid in seen:
                    continue
                seen.add(pid)
                yield _doc(source, pid, title, text.strip(), path)


def read_dpr_tsv(path: Path, source: str) -> Iterator[Document]:
    """DPR's psgs_w100.tsv: header `id<TAB>text<TAB>title`."""
    csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t")
            header = next(reader, None)
            if header != ["id", "text", "title"]:
                raise InputError(path, "header 'id<TAB>text<TAB>title'", position="line 1",
                                 found=repr(header))
            n = 0
            for lineno, row in enumerate(reader, start=2):
                if len(row) != 3:
                    raise InputError(path, "3 tab-separated fields", position=f"line {lineno}",
                                     found=f"{len(row)} fields")
                n += 1
                yield _doc(source, row[0], row[2], row[1].strip().strip('"'), path)
    except OSError as e:
        raise unreadable_input(path, "DPR passages TSV", e) from None
    if n == 0:
        raise InputError(path, "at least one passage line", found="only a header")


MAX_RECORD_BYTES = 64 << 20  # ingest.max_record_bytes: one JSONL line, one <page> of a dump


def read_jsonl(path: Path, source: str, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Document]:
    """One `{"id", "title", "text"}` object per line; a line longer than `max_record_bytes` is
    refused before it is read whole (memory stays bounded by it)."""
    n = 0
    try:
        with open(path, "rb") as f:
            for lineno, line in enumerate(iter(lambda: f.readline(max_record_bytes + 1), b""), start=1):
                if len(line) > max_record_bytes and not line.endswith(b"\n"):
                    raise InputError(path, f"a JSON line of at most ingest.max_record_bytes={max_record_bytes:,} "
                                           "bytes", position=f"line {lineno}", found="a longer one")
                if not line.strip():
                    continue
                obj = parse_json(line, path, "a JSON object", position=f"line {lineno}")
                pos = f"line {lineno}"
                doc_id = obj.get("id") if isinstance(obj, dict) else None
                if doc_id is None or isinstance(doc_id, (dict, list)):
                    raise InputError(path, "key 'id' (string or number)", position=pos,
                                     found="it missing")
                title = _require(obj, "title", path, pos, str)
                text = _require(obj, "text", path, pos, str)
                n += 1
                yield _doc(source, doc_id, title, text.strip(), path)
    except OSError as e:
        raise unreadable_input(path, "a JSONL file", e) from None
    if n == 0:
        raise InputError(path, "at least one JSON line", found="an empty file")
