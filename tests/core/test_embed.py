import os
from pathlib import Path

import numpy as np
import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER
from realm_core.errors import ArtifactError
from realm_core.retrieval.embed import (
    EncoderRecipe,
    embed_blocks,
    embed_texts,
    length_batches,
    load_embeddings,
    tokenizer_parallel_for,
)
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.store.artifacts import ArtifactStore


@pytest.fixture(scope="module")
def encoder() -> RetrieverEncoder:
    torch.manual_seed(0)
    return RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, projection_dim=16, seed=3)


def test_length_batches_group_by_length() -> None:
    assert list(length_batches([3, 9, 1, 7, 5], 2)) == [[1, 3], [4, 0], [2]]


def test_batched_equals_one_by_one_and_padding_is_inert(encoder: RetrieverEncoder) -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    titles = ["Ada", "Paris", "A"]
    bodies = ["Ada Lovelace wrote the first program.", "Paris is the capital of France and its "
              "largest city by far.", "x"]
    batched = embed_texts(encoder, tok, titles, bodies, max_length=64, batch_size=3)
    single = np.concatenate([embed_texts(encoder, tok, [t], [b], 64, 1)
                             for t, b in zip(titles, bodies, strict=True)])
    assert batched.shape == (3, 16)
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_tokenizer_parallelism_is_on_while_tokenising_and_put_back(encoder: RetrieverEncoder,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the fast tokeniser's own pool is turned on for the tokenising call only (the
    Makefile turns it off for the process); the vectors do not change."""
    import realm_core.retrieval.embed as embed

    seen: list[str | None] = []
    real = embed.tokenize_blocks

    def spy(*args: object) -> list[list[int]]:
        seen.append(os.environ.get(embed.PARALLELISM_ENV))
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(embed, "tokenize_blocks", spy)
    monkeypatch.setenv(embed.PARALLELISM_ENV, "false")
    tok = load_tokenizer(BUNDLED_ENCODER)
    titles, bodies = ["Ada", "Paris"], ["Ada Lovelace wrote the first program.", "Paris is a city."]
    as_is = embed_texts(encoder, tok, titles, bodies, 32, 2)
    on = embed_texts(encoder, tok, titles, bodies, 32, 2, tokenizer_parallel=True)
    assert seen == ["false", "true"] and os.environ[embed.PARALLELISM_ENV] == "false"
    np.testing.assert_allclose(on, as_is, atol=1e-6)
    monkeypatch.delenv(embed.PARALLELISM_ENV)
    with embed.tokenizer_parallelism(False):
        assert os.environ[embed.PARALLELISM_ENV] == "false"
    assert embed.PARALLELISM_ENV not in os.environ  # unset before, unset after
    assert tokenizer_parallel_for("auto", torch.device("cpu")) is None
    assert tokenizer_parallel_for("auto", torch.device("cuda")) is True
    assert tokenizer_parallel_for("off", torch.device("cuda")) is False


def test_save_and_load_round_trip(tmp_path: Path, encoder: RetrieverEncoder) -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    encoder.save_pretrained(tmp_path / "doc-encoder", tokenizer_source=BUNDLED_ENCODER)
    again = RetrieverEncoder.from_pretrained(str(tmp_path / "doc-encoder"))
    assert again.projection_dim == 16 and again.pooling == "cls"
    a = embed_texts(encoder, tok, ["T"], ["Some body text."], 32, 1)
    b = embed_texts(again, tok, ["T"], ["Some body text."], 32, 1)
    np.testing.assert_allclose(a, b, atol=1e-6)
    from transformers import AutoModel

    assert AutoModel.from_pretrained(str(tmp_path / "doc-encoder")).config.hidden_size == 384
    assert (tmp_path / "doc-encoder" / "model.safetensors").is_file()


def _blocks(tmp_path: Path, texts: list[str]) -> object:
    """A blocks artifact of one document titled T, one block per text."""
    store = ArtifactStore(tmp_path / "art")
    rows = [{"block_id": i, "doc_id": "d", "title": "T", "text": t, "n_wordpieces": 1,
             "char_start": 0, "char_end": 1} for i, t in enumerate(texts)]
    with store.write("blocks", "b", config={}, config_hash="c", inputs={}) as w:
        w.table("blocks").write(rows)
    return store.lookup("blocks", "b")


def test_embed_blocks_shards_in_block_order(tmp_path: Path, encoder: RetrieverEncoder) -> None:
    texts = [f"Block number {i} " + "word " * (i * 3) for i in range(7)]
    blocks = _blocks(tmp_path, texts)
    tok = load_tokenizer(BUNDLED_ENCODER)
    summary = embed_blocks(blocks, encoder, tok, tmp_path / "emb", max_length=64, batch_size=2,
                           shard_size=3)
    assert [s["rows"] for s in summary["shards"]] == [3, 3, 1]
    vectors = load_embeddings(tmp_path / "emb", summary, 7)
    direct = embed_texts(encoder, tok, ["T"] * 7, texts, 64, 7)
    np.testing.assert_allclose(vectors, direct, atol=1e-5)
    with pytest.raises(ArtifactError, match="6 embeddings for 7 blocks"):
        load_embeddings(tmp_path / "emb", {**summary, "shards": summary["shards"][:2]}, 7)
    bad = np.load(tmp_path / "emb" / "shard-00000.npy")
    bad[0, 0] = np.nan
    np.save(tmp_path / "emb" / "shard-00000.npy", bad)
    with pytest.raises(ArtifactError, match="NaN or inf"):
        load_embeddings(tmp_path / "emb", summary, 7)


def test_parallel_workers_write_the_same_shards(tmp_path: Path, encoder: RetrieverEncoder) -> None:
    blocks = _blocks(tmp_path, [f"Shard test {i} " + "token " * i for i in range(5)])
    tok = load_tokenizer(BUNDLED_ENCODER)
    kwargs = {"max_length": 64, "batch_size": 2, "shard_size": 2}
    serial = embed_blocks(blocks, encoder, tok, tmp_path / "one", **kwargs)  # type: ignore[arg-type]
    recipe = EncoderRecipe(BUNDLED_ENCODER, projection_dim=16, seed=3)  # the fixture's encoder
    parallel = embed_blocks(blocks, encoder, tok, tmp_path / "two", workers=2, recipe=recipe,
                            **kwargs)  # type: ignore[arg-type]
    assert parallel == serial and [s["rows"] for s in parallel["shards"]] == [2, 2, 1]
    np.testing.assert_allclose(load_embeddings(tmp_path / "two", parallel, 5),
                               load_embeddings(tmp_path / "one", serial, 5), atol=1e-5)


def test_embedding_leaves_chunking_tokenizer_untouched(encoder: RetrieverEncoder) -> None:
    from collections import Counter

    from realm_core.bert import load_wordpieces
    from realm_core.blocks import chunk_document

    embed_texts(encoder, load_tokenizer(BUNDLED_ENCODER), ["T"], ["body " * 50], 16, 1)
    doc = {"doc_id": "d", "title": "T", "text": "One sentence here. " * 40}
    blocks = list(chunk_document(load_wordpieces(BUNDLED_ENCODER), doc, 32, Counter()))
    assert len(blocks) > 5 and all(b["n_wordpieces"] <= 32 for b in blocks)
