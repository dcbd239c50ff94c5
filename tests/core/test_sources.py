import hashlib
import json
from pathlib import Path

import pytest

from realm_core.errors import RealmError
from realm_core.sources import Source, fetch, load_registry


def _source(name: str, path: str, sha: str, derive: dict | None = None) -> Source:
    return Source(name=name, path=path, url="unused", sha256=sha, format="x", licence="y",
                  derive=derive)


def test_fetch_verifies_sha256_over_file_url(tmp_path: Path) -> None:
    upstream = tmp_path / "up.txt"
    upstream.write_bytes(b"hello corpus\n")
    sha = hashlib.sha256(b"hello corpus\n").hexdigest()
    reg = {"good": _source("good", "sub/good.txt", sha), "bad": _source("bad", "bad.txt", "0" * 64)}
    got = fetch("good", tmp_path / "dl", url=upstream.as_uri(), registry=reg)
    assert got == tmp_path / "dl" / "sub" / "good.txt" and got.read_bytes() == b"hello corpus\n"
    with pytest.raises(RealmError, match="sha256 mismatch"):
        fetch("bad", tmp_path / "dl", url=upstream.as_uri(), registry=reg)
    assert sorted(p.name for p in (tmp_path / "dl").rglob("*") if p.is_file()) == ["good.txt"]
    with pytest.raises(RealmError, match="unknown source"):
        fetch("nope", tmp_path / "dl", registry=reg)


def test_fetch_derives_squad_slice(tmp_path: Path) -> None:
    full = {"version": "1.1", "data": [{"title": f"A{i}", "paragraphs": []} for i in range(5)]}
    upstream = tmp_path / "dev.json"
    upstream.write_text(json.dumps(full))
    sliced = json.dumps({"version": "1.1", "data": full["data"][:2]}).encode()
    reg = {"s": _source("s", "s.json", hashlib.sha256(sliced).hexdigest(), {"squad_first_articles": 2})}
    assert fetch("s", tmp_path / "dl", url=upstream.as_uri(), registry=reg).read_bytes() == sliced


def test_registry_lists_every_shared_file() -> None:
    reg = load_registry()
    assert len(reg) == 17
    for s in reg.values():
        assert len(s.sha256) == 64 and s.url.startswith("https://")
