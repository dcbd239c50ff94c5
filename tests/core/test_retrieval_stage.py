
import numpy as np
import pytest

from realm_core.bert import load_tokenizer, tokenizer_hash
from realm_core.config import BUNDLED_ENCODER, EmbedConfig, IndexConfig
from realm_core.errors import RealmError
from realm_core.retrieval.embed import embed_texts
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.stage import run_build_index, run_embed_blocks
from realm_core.retrieval.versions import load_index
from realm_core.store.artifacts import ArtifactStore


def blocks(store: ArtifactStore, key: str, texts: list[str]):  # type: ignore[no-untyped-def]
    rows = [{"block_id": i, "doc_id": f"d:{i}", "title": f"T{i}", "text": t, "n_wordpieces": 1,
             "char_start": 0, "char_end": len(t)} for i, t in enumerate(texts)]
    with store.write("blocks", key, config={}, config_hash="c", inputs={}) as w:
        w.table("blocks").write(rows)
        w.extra_manifest["tokenizer"] = {"encoder": BUNDLED_ENCODER, "hash": tokenizer_hash(BUNDLED_ENCODER),
                                         "vocab_size": 30522}
    return store.lookup("blocks", key).ref


TEXTS = ["Paris is the capital of France.", "The mitochondrion is the powerhouse of the cell.",
         "Alan Turing proposed the imitation game.", "The Nile flows north into the Mediterranean."]


def test_refresh_embeds_indexes_and_retrieves(store: ArtifactStore) -> None:
    ref = blocks(store, "b", TEXTS)
    cfg = EmbedConfig(projection_dim=32, max_length=64, batch_size=2)
    emb = run_embed_blocks(store, ref, cfg)
    assert emb.cached is False and emb.stats["blocks"] == 4 and emb.stats["retriever_step"] == 0
    assert run_embed_blocks(store, ref, cfg).cached is True
    built = run_build_index(store, emb.ref, ref, IndexConfig())
    assert built.stats == {"step": 0, "blocks": 4, "factory": "Flat", "current": True}
    index, _ = load_index(store)
    # the index returns each block for its own embedding first
    encoder = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 32, "cls", 0)
    own = embed_texts(encoder, load_tokenizer(BUNDLED_ENCODER), [f"T{i}" for i in range(4)],
                      TEXTS, 64, 4)
    _, ids = index.search(own, 1)
    assert ids[:, 0].tolist() == [0, 1, 2, 3]
    assert run_build_index(store, emb.ref, ref, IndexConfig()).cached is True


def test_index_from_other_blocks_or_conflicting_version(store: ArtifactStore) -> None:
    a, b = blocks(store, "a", TEXTS), blocks(store, "b", TEXTS[:3])
    cfg = EmbedConfig(projection_dim=8, max_length=32)
    emb_a = run_embed_blocks(store, a, cfg)
    with pytest.raises(RealmError, match="made from other blocks"):
        run_build_index(store, emb_a.ref, b, IndexConfig())
    run_build_index(store, emb_a.ref, a, IndexConfig())
    emb_b = run_embed_blocks(store, b, cfg)
    with pytest.raises(RealmError, match="index version 0 exists, built from other embeddings"):
        run_build_index(store, emb_b.ref, b, IndexConfig())
    assert np.isfinite(load_index(store)[0].index.reconstruct(0)).all()


def test_block_embeddings_publish_to_object_storage() -> None:
    # an fsspec URL root (memory:// here, s3:// or gs:// for users): blocks read through fsspec,
    # shards written to local scratch and uploaded before the manifest
    store = ArtifactStore("memory://realm-embed-root")
    ref = blocks(store, "b", TEXTS)
    emb = run_embed_blocks(store, ref, EmbedConfig(projection_dim=32, max_length=64, batch_size=2, shard_size=3))
    art = store.open(emb.ref, kind="embeddings")
    assert [s["rows"] for s in art.manifest["embeddings"]["shards"]] == [3, 1]
    assert sorted(art.manifest["files"]) == ["embeddings/shard-00000.npy", "embeddings/shard-00001.npy"]
    with store.fs.open(art.file("embeddings/shard-00001.npy"), "rb") as f:
        assert np.load(f).shape == (1, 32)
