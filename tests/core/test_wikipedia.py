import bz2
from pathlib import Path

import pytest

from realm_core.config import IngestConfig
from realm_core.errors import InputError, RealmError
from realm_core.ingest.stage import run_ingest
from realm_core.ingest.wikipedia import iter_pages
from realm_core.store.artifacts import ArtifactStore

NS10 = "http://www.mediawiki.org/xml/export-0.10/"


def page(pid: int, title: str, text: str, ns: int = 0, redirect: bool = False) -> str:
    r = f'<redirect title="{title}x" />' if redirect else ""
    return (f"<page><title>{title}</title><ns>{ns}</ns><id>{pid}</id>{r}<revision><id>{pid * 10}"
            f"</id><text xml:space=\"preserve\">{text}</text></revision></page>")


def dump(pages: list[str], ns: str = NS10, siteinfo: bool = True) -> str:
    site = "<siteinfo><sitename>Wikipedia</sitename></siteinfo>" if siteinfo else ""
    return f'<mediawiki xmlns="{ns}" version="0.10">{site}{"".join(pages)}</mediawiki>'


PAGES = [
    page(1, "Alpha", "'''Alpha''' is the first [[letter]]."),
    page(2, "Beta", "#REDIRECT [[Alpha]]", redirect=True),
    page(3, "Talk:Alpha", "chat", ns=1),
    page(4, "Gamma (disambiguation)", "'''Gamma''' may refer to: {{disambiguation}}"),
    page(5, "Delta", "Delta is a river. {{geodis}}"),
    page(6, "Epsilon", "Epsilon is a letter. #redirect in prose is fine."),
]


@pytest.mark.parametrize("ns,siteinfo,compress", [
    (NS10, True, True), ("http://www.mediawiki.org/xml/export-0.9/", False, False)])
def test_pages_are_classified(tmp_path: Path, ns: str, siteinfo: bool, compress: bool) -> None:
    xml = dump(PAGES, ns, siteinfo).encode()
    f = tmp_path / ("d.xml.bz2" if compress else "d.xml")
    f.write_bytes(bz2.compress(xml) if compress else xml)
    kinds = [(p.page_id, p.kind) for p in iter_pages(f)]
    assert kinds == [(1, "article"), (2, "redirect"), (3, "other_namespace"),
                     (4, "disambiguation"), (5, "disambiguation"), (6, "article")]
    first = next(iter_pages(f))
    assert (first.title, first.revision_id) == ("Alpha", 10)


def _ingest(tmp_path: Path, f: Path) -> None:
    cfg = IngestConfig(sources=({"kind": "wikipedia", "path": str(f)},), workers=1)
    run_ingest(ArtifactStore(tmp_path / "art"), cfg)


def _no_artifact(tmp_path: Path) -> None:
    root = tmp_path / "art"
    assert not (root / "documents").exists() or not any((root / "documents").iterdir())
    assert not (root / ".tmp").exists() or not any((root / ".tmp").iterdir())


def test_truncated_bz2(tmp_path: Path) -> None:
    data = bz2.compress(dump(PAGES * 200).encode())
    f = tmp_path / "cut.xml.bz2"
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut.xml.bz2 at compressed byte \d+: expected a complete bz2"):
        _ingest(tmp_path, f)
    _no_artifact(tmp_path)


def test_not_xml(tmp_path: Path) -> None:
    f = tmp_path / "notes.xml"
    f.write_text("this is not xml at all\n")
    with pytest.raises(InputError, match=r"notes.xml at line 1, column 0: expected well-formed"):
        _ingest(tmp_path, f)
    _no_artifact(tmp_path)


def test_not_bz2(tmp_path: Path) -> None:
    f = tmp_path / "plain.xml.bz2"
    f.write_text(dump(PAGES))
    with pytest.raises(InputError, match=r"plain.xml.bz2 at compressed byte \d+: expected bz2-compressed XML"):
        _ingest(tmp_path, f)


def test_dump_without_pages(tmp_path: Path) -> None:
    f = tmp_path / "empty.xml"
    f.write_text(dump([]))
    with pytest.raises(InputError, match="empty.xml: expected at least one <page>"):
        _ingest(tmp_path, f)
    _no_artifact(tmp_path)


def test_other_root_element(tmp_path: Path) -> None:
    f = tmp_path / "rss.xml"
    f.write_text("<rss><page/></rss>")
    with pytest.raises(InputError, match=r"found <rss>"):
        _ingest(tmp_path, f)


def test_only_redirects_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "r.xml"
    f.write_text(dump([PAGES[1]]))
    with pytest.raises(RealmError, match="no documents"):
        _ingest(tmp_path, f)
    _no_artifact(tmp_path)


def test_parallel_ingest_matches_serial(tmp_path: Path) -> None:
    f = tmp_path / "d.xml.bz2"
    many = [page(i, f"P{i}", f"Page {i} text about [[thing{i}|things]].") for i in range(1, 60)]
    f.write_bytes(bz2.compress(dump(many).encode()))
    tables = []
    for workers in (1, 2):
        cfg = IngestConfig(sources=({"kind": "wikipedia", "path": str(f)},), workers=workers,
                           chunk_pages=4)
        r = run_ingest(ArtifactStore(tmp_path / f"a{workers}"), cfg)
        art = ArtifactStore(tmp_path / f"a{workers}").open(r.ref)
        tables.append(art.read_table("documents").to_pylist())
        assert r.stats[f"source0:{f.name}"] == {"pages": 59, "article": 59, "kept": 59}
    assert tables[0] == tables[1]
    assert tables[0][2]["text"] == "Page 3 text about things."


def test_ingest_fanned_out_by_source_file_writes_the_one_process_documents(tmp_path: Path) -> None:
    from collections.abc import Iterator

    from realm_core.ingest.stage import SourceJob, ingest_source

    parts = []
    for n, pages in enumerate((PAGES, [page(6, "Epsilon", "Epsilon again, in a later part."),
                                       page(7, "Zeta", "Zeta is a letter.")])):
        part = tmp_path / f"enwiki-pages-articles{n + 1}.xml.bz2"
        part.write_bytes(bz2.compress(dump(pages).encode()))
        parts.append({"kind": "wikipedia", "path": str(part), "name": "enwiki"})
    jsonl = tmp_path / "extra.jsonl"
    jsonl.write_text('{"id": 1, "title": "A", "text": "a"}\n{"id": 1, "title": "A", "text": "again"}\n')
    # the JSONL twice: the second copy keeps nothing, and its counts must say so as one process does
    cfg = IngestConfig(sources=(*parts, {"kind": "jsonl", "path": str(jsonl)}, {"kind": "jsonl", "path": str(jsonl)}),
                       workers=1)
    one = run_ingest(ArtifactStore(tmp_path / "one"), cfg)
    left: list[list[str]] = []

    def map_sources(jobs: list[SourceJob]) -> Iterator[dict[str, object]]:
        for job in jobs:  # as Dask workers would; each earlier file must be appended and gone
            left.append(sorted(p.name for p in job.file.parent.glob("*.parquet")) if job.file.parent.exists() else [])
            yield ingest_source(job)

    fanned = run_ingest(ArtifactStore(tmp_path / "fan"), cfg, map_sources=map_sources)
    assert left == [[], [], [], []]
    assert fanned.stats == one.stats
    assert fanned.stats["source3:extra.jsonl"] == {"documents_read": 2, "duplicate_doc_id": 2}
    # page 6 of the second part repeats the first part's; line 2 of the JSONL repeats line 1
    assert fanned.stats[f"source1:{parts[1]['path'].rsplit('/', 1)[1]}"] == {
        "pages": 2, "article": 2, "kept": 1, "duplicate_doc_id": 1}
    assert fanned.stats["source2:extra.jsonl"]["duplicate_doc_id"] == 1
    rows = [ArtifactStore(tmp_path / d).open(r.ref).read_table("documents").to_pylist()
            for d, r in (("one", one), ("fan", fanned))]
    assert rows[0] == rows[1]
    assert [r["doc_id"] for r in rows[1]] == ["enwiki:1", "enwiki:6", "enwiki:7", "jsonl:1"]
    assert fanned.ref.content_hash == one.ref.content_hash
