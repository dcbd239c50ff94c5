"""Nasty pages (tests/fixtures/nasty_pages.jsonl, synthetic): nested links, templates and
italics, unclosed markup, right-to-left and CJK titles, tables and refs; read from a real bz2
dump and cleaned to the expected text. A generated multi-MB page leaks no markup and chunks
within bounded segments."""

import bz2
import json
import re
from collections import Counter
from pathlib import Path
from xml.sax.saxutils import escape

from realm_core.bert import load_wordpieces
from realm_core.blocks import SEGMENT_CHARS, chunk_document
from realm_core.config import BUNDLED_ENCODER
from realm_core.ingest.wikipedia import iter_pages
from realm_core.ingest.wikitext import clean_wikitext

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nasty_pages.jsonl"
MARKUP = ("{{", "}}", "[[", "]]", "''", "{|", "|}", "<ref", "&amp;")


def _dump(pages: list[dict], path: Path) -> Path:
    body = "".join(f"<page><title>{escape(p['title'])}</title><ns>0</ns><id>{p['page_id']}</id>"
                   f"<revision><id>{p['page_id']}</id><text>{escape(p['wikitext'])}</text></revision></page>"
                   for p in pages)
    path.write_bytes(bz2.compress(f"<mediawiki>{body}</mediawiki>".encode()))
    return path


def test_nasty_pages_clean_to_the_expected_text(tmp_path: Path) -> None:
    pages = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    read = list(iter_pages(_dump(pages, tmp_path / "nasty.xml.bz2")))
    assert [p.title for p in read] == [p["title"] for p in pages]  # RTL and CJK titles intact
    for raw, page in zip(read, pages, strict=True):
        assert clean_wikitext(raw.wikitext) == page["clean"], page["title"]


def test_a_multi_megabyte_page_leaks_no_markup_and_chunks_in_segments() -> None:
    unit = ("'''Section''' about [[Target|a ''linked'' thing]] with {{convert|3|km|mi}} and "
            "{{cite web|url=http://x|title={{lang|fr|t}}}} text.<ref>note</ref> {{lang-la|verbum}} "
            "and ''italic'' prose.\n\n")
    wikitext = unit * (3_000_000 // len(unit))  # about 3 MB
    text = clean_wikitext(wikitext)
    assert len(wikitext) > 2_900_000
    assert {m: text.count(m) for m in MARKUP} == dict.fromkeys(MARKUP, 0)
    assert text.startswith("Section about a linked thing with 3 km and text. verbum and italic prose.")
    stats: Counter[str] = Counter()
    blocks = list(chunk_document(load_wordpieces(BUNDLED_ENCODER), {"doc_id": "d", "title": "Big", "text": text},
                                 288, stats))
    assert stats["segmented_documents"] == 1 and len(text) > 10 * SEGMENT_CHARS
    assert all(b["n_wordpieces"] <= 288 for b in blocks)
    assert re.sub(r"\s", "", "".join(b["text"] for b in blocks)) == re.sub(r"\s", "", text)
