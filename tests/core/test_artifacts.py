import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from realm_core.errors import ArtifactError
from realm_core.store.artifacts import RACY_S, ArtifactStore, sha256_file
from realm_core.store.cache import CachedStage, artifact_key


def _doc(i: int) -> dict:
    return {"doc_id": f"t:{i}", "title": f"T{i}", "text": f"text {i}", "source": "t",
            "source_file": "f", "page_id": i, "revision_id": None}


def _write(store: ArtifactStore, key: str, n: int, rows_per_file: int = 2) -> str:
    with store.write("documents", key, config={"a": 1}, config_hash="c", inputs={"x": "h"}) as w:
        w.table("documents", rows_per_file=rows_per_file).write([_doc(i) for i in range(n)])
    return store.path("documents", key)


def test_round_trip_with_manifest_and_parts(store: ArtifactStore) -> None:
    path = _write(store, "k1", 5)
    art = store.open(path, kind="documents")
    assert art.rows("documents") == 5
    assert sorted(art.manifest["files"]) == [f"documents/part-0000{i}.parquet" for i in range(3)]
    assert art.read_table("documents").column("doc_id").to_pylist() == [f"t:{i}" for i in range(5)]
    assert art.manifest["inputs"] == {"x": "h"} and art.manifest["config_hash"] == "c"
    assert store.lookup("documents", "k1") is not None
    assert store.lookup("documents", "other") is None


def test_content_hash_is_deterministic(tmp_path: Path) -> None:
    a = _write(ArtifactStore(tmp_path / "a"), "k", 4)
    b = _write(ArtifactStore(tmp_path / "b"), "k", 4)
    ha = ArtifactStore(tmp_path / "a").open(a).ref.content_hash
    hb = ArtifactStore(tmp_path / "b").open(b).ref.content_hash
    assert ha == hb
    c = _write(ArtifactStore(tmp_path / "c"), "k", 3)
    assert ArtifactStore(tmp_path / "c").open(c).ref.content_hash != ha


def test_failed_write_leaves_nothing(store: ArtifactStore) -> None:
    with pytest.raises(RuntimeError):
        with store.write("documents", "k", config={}, config_hash="c", inputs={}) as w:
            w.table("documents").write([_doc(0)])
            raise RuntimeError("killed mid-write")
    assert not Path(store.path("documents", "k")).exists()
    assert list((Path(store.root) / ".tmp").iterdir()) == []


def test_rows_of_wrong_schema_are_refused(store: ArtifactStore) -> None:
    with pytest.raises(ArtifactError, match="do not fit schema"):
        with store.write("documents", "k", config={}, config_hash="c", inputs={}) as w:
            w.table("documents").write(pa.table({"doc_id": ["a"]}))
    assert not Path(store.path("documents", "k")).exists()


def test_reader_names_missing_column_and_bad_version(store: ArtifactStore) -> None:
    path = _write(store, "k", 2, rows_per_file=10)
    part = Path(path) / "documents" / "part-00000.parquet"
    pq.write_table(pq.read_table(part).drop(["title"]), part)
    with pytest.raises(ArtifactError, match=r"lacks columns \['title'\]"):
        store.open(path).read_table("documents")
    manifest = Path(path) / "manifest.json"
    m = json.loads(manifest.read_text())
    m["schema_version"] = 99
    manifest.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="schema version 99"):
        store.open(path)
    with pytest.raises(ArtifactError, match="expected a 'blocks' artifact"):
        m["schema_version"] = 1
        manifest.write_text(json.dumps(m))
        store.open(path, kind="blocks")
    manifest.write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt manifest"):
        store.open(path)


def test_half_written_directory_is_not_an_artifact(store: ArtifactStore) -> None:
    d = Path(store.path("documents", "k"))
    d.mkdir(parents=True)
    assert store.lookup("documents", "k") is None
    with pytest.raises(ArtifactError, match="never finished"):
        store.open(str(d))


def test_concurrent_writers_of_one_key_publish_one_copy(store: ArtifactStore) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _write(store, "same", 50, rows_per_file=7)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.open(store.path("documents", "same")).rows("documents") == 50
    assert list((Path(store.root) / ".tmp").iterdir()) == []


def test_forced_rewrite_replaces(store: ArtifactStore) -> None:
    _write(store, "k", 2)
    with store.write("documents", "k", config={}, config_hash="c", inputs={}, replace=True) as w:
        w.table("documents").write([_doc(i) for i in range(3)])
    assert store.open(store.path("documents", "k")).rows("documents") == 3


def test_forced_rewrite_never_leaves_the_key_without_an_artifact(store: ArtifactStore,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader in another process must find the old artifact or the new one at every moment of
    a --force rerun: every rename the store makes leaves a published manifest in place (the
    two-step move-aside-then-rename did not)."""
    import realm_core.store.artifacts as artifacts

    final = Path(_write(store, "k", 2))
    gaps: list[str] = []
    real_rename = artifacts.os.rename

    def watched(src: object, dst: object) -> None:
        real_rename(src, dst)
        if not (final / "manifest.json").exists():
            gaps.append(f"{src} -> {dst}")

    monkeypatch.setattr(artifacts.os, "rename", watched)
    for n in (3, 4):
        with store.write("documents", "k", config={}, config_hash="c", inputs={}, replace=True) as w:
            w.table("documents").write([_doc(i) for i in range(n)])
        assert store.open(store.path("documents", "k")).rows("documents") == n
    assert gaps == []
    assert list((Path(store.root) / ".tmp").iterdir()) == []


def test_stale_scratch_of_a_killed_process_is_swept(store: ArtifactStore) -> None:
    """Temp directories of dead processes on this host go at the next write; those of live
    processes (this one) and of other hosts stay."""
    import os
    import subprocess
    import sys

    from realm_core.store.scratch import scratch_name

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    scratch = Path(store.root) / ".tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    mine = scratch_name("documents", "a")
    host, _, _ = mine.split(".")[-3:]
    stale = scratch / f"documents-b.{host}.{dead.stdout.strip()}.deadbeef"
    live = scratch / f"documents-c.{host}.{os.getpid()}.cafef00d"
    elsewhere = scratch / f"documents-d.otherhost.{dead.stdout.strip()}.0badc0de"
    for d in (stale, live, elsewhere):
        (d / "documents").mkdir(parents=True)
    _write(store, "new", 1)
    assert sorted(p.name for p in scratch.iterdir()) == sorted([live.name, elsewhere.name])


def test_key_depends_on_config_and_inputs() -> None:
    k = artifact_key("c", {"a": "1", "b": "2"})
    assert k == artifact_key("c", {"b": "2", "a": "1"})
    assert k != artifact_key("c2", {"a": "1", "b": "2"})
    assert k != artifact_key("c", {"a": "1", "b": "3"})


def test_memory_filesystem_publishes_manifest_last() -> None:
    store = ArtifactStore("memory://realm-test-root")
    with store.write("documents", "m", config={}, config_hash="c", inputs={}) as w:
        w.table("documents").write([_doc(0), _doc(1)])
    art = store.lookup("documents", "m")
    assert art is not None and art.read_table("documents").num_rows == 2


def test_object_storage_uploads_the_manifest_last_and_a_failed_write_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = ArtifactStore("memory://realm-order-root")
    uploaded: list[str] = []
    put_file = store.fs.put_file
    monkeypatch.setattr(store.fs, "put_file", lambda src, dst, **kw: (uploaded.append(dst.rsplit("/", 1)[-1]),
                                                                      put_file(src, dst, **kw)))
    _write(store, "ordered", 5)
    assert uploaded[-1] == "manifest.json" and len(uploaded) == 4  # 3 parts of 2 rows, then the manifest
    with pytest.raises(RuntimeError), store.write("documents", "broken", config={}, config_hash="c",
                                                  inputs={}) as w:
        w.table("documents").write([_doc(0)])
        raise RuntimeError("killed mid-stage")
    assert store.lookup("documents", "broken") is None
    assert not store.fs.exists(store.path("documents", "broken"))


def test_read_rows_reads_a_range_across_part_files(store: ArtifactStore) -> None:
    art = store.open(_write(store, "parts", 7, rows_per_file=3))  # parts of 3, 3, 1 rows
    rows = art.read_rows("documents", 2, 7, ["page_id"])
    assert rows.column("page_id").to_pylist() == [2, 3, 4, 5, 6]
    assert art.read_rows("documents", 3, 6, ["page_id"]).column("page_id").to_pylist() == [3, 4, 5]
    with pytest.raises(ArtifactError, match=r"no rows \[9, 12\)"):
        art.read_rows("documents", 9, 12)


def test_code_version_tracks_sources_and_packages() -> None:
    from realm_core.store.cache import code_version

    a = code_version(("realm_core.blocks",))
    assert a == code_version(("realm_core.blocks",))
    assert a != code_version(("realm_core.blocks", "realm_core.store.schemas"))
    assert a != code_version(("realm_core.blocks",), ("pyarrow",))


def test_a_stage_code_hash_covers_what_its_module_imports_indirectly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Computed, not listed by hand: ingest's hash covers the template renderer, which only the
    wikitext cleaner imports (a hand-kept list once missed it)."""
    from realm_core.store import cache

    closure = cache.module_closure("realm_core.ingest.stage")
    assert {"realm_core.ingest.wikitext", "realm_core.ingest.wikitemplates", "realm_core.ingest.corpora"} <= set(closure)
    assert not set(closure) & cache.NOT_SCIENCE
    before = cache.code_version(("realm_core.ingest.stage",))
    blocks_before = cache.code_version(("realm_core.blocks",))
    templates = cache._source("realm_core.ingest.wikitemplates")
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: real(p) + (b"# edited" if p == templates else b""))
    cache.code_version.cache_clear()
    try:
        assert cache.code_version(("realm_core.ingest.stage",)) != before
        assert cache.code_version(("realm_core.blocks",)) == blocks_before  # outside its closure
    finally:
        cache.code_version.cache_clear()


def test_cached_stage_writes_once_then_hits_and_force_rewrites(store: ArtifactStore) -> None:
    produced: list[int] = []

    def run(n: int, force: bool = False) -> object:
        cache = CachedStage(store, "documents", {"rows": 2}, {"x": "h"}, force)
        if cache.hit:
            return cache.hit
        produced.append(n)
        with cache.write() as out:
            out.table("documents").write([_doc(i) for i in range(n)])
            out.extra_manifest.update({"stats": {"documents": n}, "report": f"{n} rows"})
        return cache.result()

    first = run(3)
    again = run(5)  # same config and inputs: a hit, the work is not done again
    assert produced == [3] and not first.cached and again.cached  # type: ignore[attr-defined]
    assert again.stats == {"documents": 3} and again.report == "3 rows" and again.ref == first.ref  # type: ignore[attr-defined]
    forced = run(4, force=True)
    assert produced == [3, 4] and not forced.cached and forced.stats == {"documents": 4}  # type: ignore[attr-defined]
    assert store.open(forced.ref.path).rows("documents") == 4  # type: ignore[attr-defined]
    other = CachedStage(store, "documents", {"rows": 2}, {"x": "other input"})
    assert other.key != CachedStage(store, "documents", {"rows": 2}, {"x": "h"}).key and other.hit is None


def test_existing_artifacts_only_refuses_a_miss_and_still_serves_a_hit(store: ArtifactStore) -> None:
    from realm_core.errors import MissingArtifactError
    from realm_core.store.cache import existing_artifacts_only

    cache = CachedStage(store, "documents", {"rows": 1}, {"x": "h"})
    with existing_artifacts_only(), pytest.raises(MissingArtifactError, match=f"documents/{cache.key}"):
        assert cache.hit is None
    assert cache.hit is None  # outside it a miss is a miss again
    with cache.write() as out:
        out.table("documents").write([_doc(0)])
        out.extra_manifest["stats"] = {"documents": 1}
    with existing_artifacts_only():
        hit = cache.hit
    assert hit is not None and hit.stats == {"documents": 1}


def test_cached_stage_refuses_an_artifact_without_stats(store: ArtifactStore) -> None:
    cache = CachedStage(store, "documents", {"rows": 1}, {})
    with pytest.raises(ArtifactError, match="no stats"):
        with cache.write() as out:
            out.table("documents").write([_doc(0)])
    assert cache.hit is None and list((Path(store.root) / ".tmp").iterdir()) == []


def test_a_settled_files_digest_is_remembered_and_a_fresh_ones_is_not(tmp_path: Path) -> None:
    """sha256_file remembers a local file's digest by its identity and stat, but only once the file
    has settled (modified more than RACY_S ago): a file rewritten within the clock's granularity
    keeps its mtime, and must be read again."""
    settled, fresh = tmp_path / "settled.bin", tmp_path / "fresh.bin"
    for path in (settled, fresh):
        path.write_bytes(b"a" * 1000)
    old = time.time_ns() - int((RACY_S + 10) * 1e9)
    os.utime(settled, ns=(old, old))
    assert sha256_file(settled) == sha256_file(fresh) == hashlib.sha256(b"a" * 1000).hexdigest()

    # the same bytes count, the same mtime: only the settled file's digest is taken from memory
    for path in (settled, fresh):
        stat = path.stat()
        path.write_bytes(b"b" * 1000)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sha256_file(settled) == hashlib.sha256(b"a" * 1000).hexdigest()
    assert sha256_file(fresh) == hashlib.sha256(b"b" * 1000).hexdigest()

    # any change the stat sees is read again
    settled.write_bytes(b"c" * 1000)
    assert sha256_file(settled) == hashlib.sha256(b"c" * 1000).hexdigest()
