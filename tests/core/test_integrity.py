"""A cache hit checks what it serves: every file of the artifact against its manifest (present,
its size, its sha256), a damaged one a `CorruptArtifactError` naming the file, which `--force`
recomputes. Manifests name files of their own store by store-relative path, so a store that is
copied or moved serves its own files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from realm_core.errors import CorruptArtifactError
from realm_core.store.artifacts import STORE_PREFIX, ArtifactStore
from realm_core.store.cache import CachedStage
from tests.corruption import DAMAGE, bad_json


def _doc(i: int) -> dict[str, object]:
    return {"doc_id": f"t:{i}", "title": f"T{i}", "text": f"text {i}", "source": "t",
            "source_file": "f", "page_id": i, "revision_id": None}


def _stage(store: ArtifactStore, n: int = 5, force: bool = False) -> tuple[CachedStage, object]:
    cache = CachedStage(store, "documents", {"rows": 2}, {"x": "h"}, force)
    if (hit := cache.hit) is not None:
        return cache, hit
    with cache.write() as out:
        out.table("documents", rows_per_file=2).write([_doc(i) for i in range(n)])
        out.extra_manifest["stats"] = {"documents": n}
    return cache, cache.result()


def _part(store: ArtifactStore, cache: CachedStage) -> Path:
    return Path(store.path("documents", cache.key)) / "documents" / "part-00001.parquet"


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_file_is_refused_on_a_hit_and_force_recomputes_it(store: ArtifactStore, damage: str) -> None:
    cache, _ = _stage(store)
    part = _part(store, cache)
    DAMAGE[damage](part)
    with pytest.raises(CorruptArtifactError, match="part-00001.parquet") as caught:
        _stage(store)
    assert caught.value.path == str(part)
    _, forced = _stage(store, force=True)  # the same one-rename publish as any forced rerun
    assert not forced.cached  # type: ignore[attr-defined]
    _, again = _stage(store)
    assert again.cached and store.open(again.ref).read_table("documents").num_rows == 5  # type: ignore[attr-defined]


def test_a_manifest_cut_mid_object_is_a_corrupt_artifact(store: ArtifactStore) -> None:
    cache, _ = _stage(store)
    bad_json(Path(store.path("documents", cache.key)) / "manifest.json")
    with pytest.raises(CorruptArtifactError, match="corrupt manifest"):
        _stage(store)
    _stage(store, force=True)
    assert _stage(store)[1].cached  # type: ignore[attr-defined]


def test_size_mode_catches_a_cut_file_and_content_mode_a_rewritten_one(tmp_path: Path) -> None:
    sized = ArtifactStore(tmp_path / "s", verify="size")
    cache, _ = _stage(sized)
    DAMAGE["random bytes"](_part(sized, cache))
    assert _stage(sized)[1].cached  # type: ignore[attr-defined]  # same size: only a hash can tell
    art = sized.open(sized.path("documents", cache.key))
    with pytest.raises(CorruptArtifactError, match="sha256"):
        art.verify("content")
    DAMAGE["truncated"](_part(sized, cache))
    with pytest.raises(CorruptArtifactError, match="bytes where the manifest records"):
        _stage(sized)


def test_a_manifest_without_sizes_is_checked_by_content(store: ArtifactStore) -> None:
    """Artifacts published before sizes were recorded still have their hashes checked."""
    import json

    cache, _ = _stage(store)
    manifest = Path(store.path("documents", cache.key)) / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["sizes"]
    manifest.write_text(json.dumps(m))
    assert ArtifactStore(store.root, verify="size").lookup("documents", cache.key) is not None
    DAMAGE["random bytes"](_part(store, cache))
    with pytest.raises(CorruptArtifactError, match="sha256"):
        ArtifactStore(store.root, verify="size").lookup("documents", cache.key)


def test_the_resolver_names_the_stage_whose_cached_artifact_is_damaged(tmp_path: Path) -> None:
    from realm_core.config import load_config
    from realm_core.graph.resolver import Resolver

    def damaged(stage, inputs):  # type: ignore[no-untyped-def]  # the first stage resolved finds its hit damaged
        raise CorruptArtifactError("/x/documents/k/documents/part-00000.parquet", "missing: the manifest lists it")

    resolver = Resolver(load_config("tiny"), ArtifactStore(tmp_path / "art"), hook=damaged)
    with pytest.raises(CorruptArtifactError, match="part-00000.parquet: missing.*stage 'ingest' is damaged: "
                                                   "recompute it with --force"):
        resolver.run("chunk")


def test_paths_inside_the_store_are_named_relative_to_it(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "art")
    inside = f"{store.root}/retriever/abc/doc_encoder"
    assert store.relative(inside) == f"{STORE_PREFIX}retriever/abc/doc_encoder"
    assert store.resolve(store.relative(inside)) == inside
    assert store.relative("/opt/models/bert") == "/opt/models/bert" == store.resolve("/opt/models/bert")
    # a manifest written before paths were relative names the original store's copy: a copy of
    # the store resolves it to its own artifact where that exists
    (Path(store.root) / "retriever" / "abc" / "doc_encoder").mkdir(parents=True)
    (Path(store.root) / "retriever" / "abc" / "manifest.json").write_text("{}")
    old = "/somewhere/else/artifacts/retriever/abc/doc_encoder"
    assert store.resolve(old) == inside
    copy = ArtifactStore(tmp_path / "copy")
    shutil.copytree(Path(store.root) / "retriever", Path(copy.root) / "retriever")
    assert copy.resolve(inside) == f"{copy.root}/retriever/abc/doc_encoder"


def test_an_index_version_names_its_encoder_by_store_path_and_force_replaces_it(store: ArtifactStore) -> None:
    import json

    import numpy as np

    from realm_core.errors import RealmError
    from realm_core.retrieval.index import MipsIndex
    from realm_core.retrieval.versions import encoder_dir, load_index, publish_index

    def index(v: float) -> MipsIndex:
        i = MipsIndex.build(2)
        i.add(np.array([[1, v], [v, 1]], dtype=np.float32), np.array([0, 1]))
        return i

    encoder = f"{store.root}/retriever/k/doc_encoder"
    publish_index(store, 3, index(0.1), encoder_checkpoint=encoder, embeddings_hash="e", blocks_hash="b")
    manifest = json.loads((Path(store.root) / "index" / "v00000003" / "manifest.json").read_text())
    assert manifest["encoder_checkpoint"] == f"{STORE_PREFIX}retriever/k/doc_encoder"
    with pytest.raises(RealmError, match="exists already"):
        publish_index(store, 3, index(0.2), encoder_checkpoint=encoder, embeddings_hash="e2", blocks_hash="b")
    DAMAGE["truncated"](Path(store.root) / "index" / "v00000003" / "index.faiss")
    with pytest.raises(CorruptArtifactError, match="index.faiss"):
        load_index(store, 3)
    publish_index(store, 3, index(0.2), encoder_checkpoint=encoder, embeddings_hash="e2", blocks_hash="b",
                  replace=True)
    loaded, art = load_index(store, 3)
    assert art.manifest["inputs"]["embeddings"] == "e2" and len(loaded) == 2
    assert encoder_dir(store, art) == encoder


def test_realm_verify_reports_a_store_and_names_what_is_damaged(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli import app

    store = ArtifactStore(tmp_path / "art")
    cache, _ = _stage(store)
    runner = CliRunner()
    r = runner.invoke(app, ["verify", "--root", str(tmp_path / "art")], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "1 artifact," in r.output and "every artifact matches" in r.output
    DAMAGE["random bytes"](_part(store, cache))
    r = runner.invoke(app, ["verify", "--root", str(tmp_path / "art"), "--sizes-only"], env={"COLUMNS": "300"})
    assert r.exit_code == 0  # the same size: only the hash can tell
    r = runner.invoke(app, ["verify", "--root", str(tmp_path / "art")], env={"COLUMNS": "300"})
    assert r.exit_code == 2 and "part-00001.parquet: sha256" in r.output
    r = runner.invoke(app, ["verify", "--root", str(tmp_path / "nowhere")], env={"COLUMNS": "300"})
    assert r.exit_code == 2 and "expected an artifact store" in r.output and not (tmp_path / "nowhere").exists()


def test_a_hit_is_looked_up_and_verified_once(store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stages ask `if cache.hit: return cache.hit`: the artifact's files are checked once."""
    from realm_core.store.artifacts import Artifact

    cache, _ = _stage(store)
    checks: list[str] = []
    real = Artifact.verify
    monkeypatch.setattr(Artifact, "verify", lambda self, mode="content": checks.append(self.path) or real(self, mode))
    again = CachedStage(store, "documents", {"rows": 2}, {"x": "h"})
    assert again.hit is not None and again.hit is again.hit
    assert len(checks) == 1
