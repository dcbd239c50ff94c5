"""Streaming reader of MediaWiki XML exports (`.xml` or `.xml.bz2`, export schema 0.9/0.10,
with or without `<siteinfo>`). Memory stays flat: each `<page>` is yielded and then cleared, and
no page may hold more than a set number of bytes.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, cast

from realm_core.errors import InputError, check_input_file, unreadable_input

PageKind = Literal["article", "redirect", "disambiguation", "other_namespace"]

# The {{disambiguation}} family (Wikipedia:Disambiguation#Templates) and its redirects.
DISAMBIGUATION_TEMPLATES = frozenset({
    "disambiguation", "disambig", "disamb", "dab", "dp", "geodis", "hndis", "hndab",
    "hospitaldis", "mathdab", "numberdis", "schooldis", "disambiguation cleanup",
    "shipindex", "mountainindex", "roaddis", "letter disambiguation", "airport disambiguation",
    "call sign disambiguation", "place name disambiguation", "human name disambiguation",
})
_TEMPLATE_NAME = re.compile(r"\{\{\s*([^{}|]+?)\s*(?:\||\}\})")
_REDIRECT_TEXT = re.compile(r"^\s*#redirect\b", re.IGNORECASE)
# expat: "no element found", "unclosed token", "partial character": the input stopped mid-way.
_TRUNCATED = {3, 5, 6}


@dataclass(frozen=True)
class RawPage:
    page_id: int
    title: str
    namespace: int
    revision_id: int | None
    wikitext: str
    redirect: bool

    @property
    def kind(self) -> PageKind:
        if self.namespace != 0:
            return "other_namespace"
        if self.redirect or _REDIRECT_TEXT.match(self.wikitext):
            return "redirect"
        if is_disambiguation(self.wikitext):
            return "disambiguation"
        return "article"


def is_disambiguation(wikitext: str) -> bool:
    return any(m.group(1).strip().lower().replace("_", " ") in DISAMBIGUATION_TEMPLATES
               for m in _TEMPLATE_NAME.finditer(wikitext))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _open(path: Path, bz2_threads: int) -> tuple[IO[bytes], IO[bytes]]:
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise unreadable_input(path, "a MediaWiki XML dump file", e) from None
    if path.suffix != ".bz2":
        return raw, raw
    if raw.read(3) != b"BZh":
        raw.close()
        raise InputError(path, "bz2-compressed XML (a .bz2 file starts with 'BZh')",
                         position="compressed byte 0", found="another format")
    raw.seek(0)
    try:
        # indexed_bzip2 decodes ~1.4x faster than libbz2 on one thread and can use several;
        # decompression is most of the reading process's time on a dump.
        import indexed_bzip2

        return raw, indexed_bzip2.open(raw, parallelization=bz2_threads)
    except ImportError:
        return raw, bz2.BZ2File(raw)


def _compressed_position(stream: IO[bytes], raw: IO[bytes]) -> str:
    tell = getattr(stream, "tell_compressed", None)
    return f"compressed byte {tell() // 8 if tell else raw.tell()}"


FEED_BYTES = 1 << 20  # decompressed XML handed to the parser at a time


def _entity_declarations(head: bytes) -> bool:
    """Whether the prologue (what precedes the root element) declares entities: a MediaWiki
    export never does, and expanding them is how a small file becomes a large document."""
    root = head.find(b"<mediawiki")
    return b"<!ENTITY" in (head if root < 0 else head[:root])


def iter_pages(path: str | Path, bz2_threads: int = 1, max_page_bytes: int = 64 << 20) -> Iterator[RawPage]:
    """Yield every `<page>` of a dump, in order. Bad input raises InputError naming the position.

    The XML is fed to the parser a megabyte at a time and each finished page is dropped, so
    memory stays flat however large the dump; a page longer than `max_page_bytes` of XML (to
    within one feed) is refused rather than held, and a prologue that declares entities is
    refused rather than expanded."""
    path = Path(path)
    check_input_file(path, "a MediaWiki XML dump file")
    raw, stream = _open(path, bz2_threads)
    pages, fed = 0, 0
    page_from: int | None = None  # bytes fed before the chunk the open page started in
    head = b""
    try:
        parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
        root: ET.Element | None = None

        def events() -> Iterator[RawPage]:
            nonlocal root, page_from, pages
            for event, elem in cast(Iterator[tuple[str, ET.Element]], parser.read_events()):
                if root is None:
                    root = elem
                    if _local(root.tag) != "mediawiki":
                        raise InputError(path, "a MediaWiki export (<mediawiki> root element)",
                                         position="byte 0", found=f"<{_local(root.tag)}>")
                if _local(elem.tag) != "page":
                    continue
                if event == "start":
                    page_from = chunk_start
                    continue
                yield _page(path, elem, pages)
                pages += 1
                page_from = None
                assert root is not None
                root.clear()  # drop finished pages: memory stays flat however large the dump

        while chunk := stream.read(FEED_BYTES):
            if root is None and len(head) < FEED_BYTES:
                head += chunk[:FEED_BYTES]
                if _entity_declarations(head):
                    raise InputError(path, "a MediaWiki dump without entity declarations (<!ENTITY>)",
                                     position="the prologue", found="a document type that declares entities")
            chunk_start = fed
            parser.feed(chunk)
            fed += len(chunk)
            yield from events()
            if page_from is not None and fed - page_from > max_page_bytes + FEED_BYTES:
                raise InputError(path, f"pages of at most ingest.max_record_bytes={max_page_bytes:,} bytes of XML",
                                 position=f"page #{pages + 1}", found="a longer one (refused, not read whole)")
        chunk_start = fed
        parser.close()
        yield from events()
    except ET.ParseError as e:
        line, col = e.position
        if e.code in _TRUNCATED and (pages > 0 or col > 0 or fed > 0):
            raise InputError(path, "a complete MediaWiki dump", position=f"line {line}, column {col}",
                             found=f"the file ends early (truncated after {pages} pages)") from None
        raise InputError(path, "well-formed MediaWiki XML", position=f"line {line}, column {col}",
                         found=str(e).split(":")[0]) from None
    except (EOFError, RuntimeError, ValueError, OSError) as e:
        # libbz2 says EOFError, indexed_bzip2 a RuntimeError ("std::exception"), for a stream
        # cut short: the position says where; the library's words only when they say something
        said = str(e).strip()
        detail = f" ({said})" if said and "std::exception" not in said else ""
        raise InputError(path, "a complete bz2 stream", position=_compressed_position(stream, raw),
                         found=f"the file ends early or is corrupt after {pages} pages{detail}") from None
    finally:
        stream.close()
        raw.close()
    if pages == 0:
        raise InputError(path, "at least one <page> element", found="a dump with no pages")


def _page(path: Path, elem: ET.Element, index: int) -> RawPage:
    fields = {_local(c.tag): c for c in elem}
    try:
        title = fields["title"].text or ""
        page_id = int(fields["id"].text or "")
        ns = int(fields["ns"].text or "0") if "ns" in fields else 0
    except (KeyError, ValueError) as e:
        raise InputError(path, "<page> with <title>, <id> and <ns>", position=f"page #{index + 1}",
                         found=f"missing or bad {e}") from None
    revision = fields.get("revision")
    text, rev_id = "", None
    if revision is not None:
        for child in revision:
            name = _local(child.tag)
            if name == "text":
                text = child.text or ""
            elif name == "id":
                rev_id = int(child.text) if child.text else None
    return RawPage(page_id, title, ns, rev_id, text, "redirect" in fields)
