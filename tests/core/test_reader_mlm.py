"""The reader's masked-LM warm-up: BERT's masking, determinism and exact resume."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from safetensors.torch import load_file

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER, PretrainConfig, ReaderMlmConfig
from realm_core.distributed import Placement
from realm_core.pretrain.batches import BlockTexts
from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
from realm_core.pretrain.reader_mlm import mlm_batch, train_reader_mlm
from realm_core.pretrain.stage import run_warm_reader
from realm_core.progress import NoProgress
from realm_core.store.artifacts import ArtifactStore
from tests.killing import KillAfter, Killed

BLOCKS = pa.table({"block_id": [0, 1, 2, 3], "doc_id": ["a:1", "a:1", "b:2", "c:3"],
                   "title": ["Ada Lovelace", "Ada Lovelace", "Charles Babbage", "London"],
                   "text": ["Ada wrote the first program for the Analytical Engine in 1843.",
                            "She was born in London, the daughter of Lord Byron.",
                            "Babbage designed the Analytical Engine, a mechanical computer.",
                            "London is the capital of England and of the United Kingdom."]})


def test_bert_masking_chooses_wordpieces_never_specials_and_keeps_the_originals_as_targets() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    pieces = [(tok("Ada Lovelace", add_special_tokens=False)["input_ids"],
               tok("word " * 200, add_special_tokens=False)["input_ids"]),
              (tok("x", add_special_tokens=False)["input_ids"], [])]
    batch = mlm_batch(pieces, tok, 128, 0.15, torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == (2, 128)
    assert int(batch.attention_mask[1].sum()) == 4  # [CLS] x [SEP] [SEP]: cut at 128 for the first
    original = torch.tensor([tok.cls_token_id, *(pieces[0][0] + [tok.sep_token_id] + pieces[0][1])[:126],
                             tok.sep_token_id])
    n = int(batch.target_mask[0].sum())
    positions = batch.masked_positions[0, :n]
    assert 5 <= n <= 40  # about 15% of 126 choosable wordpieces
    assert torch.equal(batch.targets[0, :n], original[positions])
    assert not bool(((original[positions] == tok.cls_token_id) | (original[positions] == tok.sep_token_id)).any())
    changed = batch.input_ids[0] != original
    assert set(changed.nonzero().squeeze(1).tolist()) <= set(positions.tolist())  # only chosen ones change
    assert int((batch.input_ids[0, positions] == tok.mask_token_id).sum()) >= n // 2
    assert int(batch.target_mask[1].sum()) == 1  # a block with one choosable wordpiece still gets one
    again = mlm_batch(pieces, tok, 128, 0.15, torch.Generator().manual_seed(0))
    assert torch.equal(again.input_ids, batch.input_ids) and torch.equal(again.masked_positions, batch.masked_positions)


def test_a_killed_warm_up_resumes_to_the_uninterrupted_weights(tiny_bert: str, tmp_path: Path) -> None:
    tok = load_tokenizer(tiny_bert)
    config = ReaderMlmConfig(steps=4, batch_size=2, length=32, learning_rate=1e-3, warmup_steps=1,
                             checkpoint_every=2)
    blocks = BlockTexts.from_table(BLOCKS)
    ids = np.array([0, 1, 3])  # block 2 is held out: never read

    def train(root: Path, progress) -> KnowledgeAugmentedEncoder:  # type: ignore[no-untyped-def]
        reader = KnowledgeAugmentedEncoder.from_pretrained(tiny_bert, dropout=0.0, seed=0)
        train_reader_mlm(reader, blocks, ids, tok, config, root, progress, Placement.single())
        return reader

    full = train(tmp_path / "a", NoProgress())
    with pytest.raises(Killed):
        train(tmp_path / "b", KillAfter(3))  # step 2's checkpoint is on disk, step 3's is not
    resumed = train(tmp_path / "b", NoProgress())
    untrained = KnowledgeAugmentedEncoder.from_pretrained(tiny_bert, dropout=0.0, seed=0)
    x, y, u = full.state_dict(), resumed.state_dict(), untrained.state_dict()
    assert all(torch.equal(x[k], y[k]) for k in x)
    assert any(not torch.equal(x[k], u[k]) for k in x)
    saved = load_file(str(tmp_path / "b" / "step-00000004" / "reader.safetensors"))
    assert saved and all(torch.equal(saved[k], y[k]) for k in saved)
    assert 2 not in {int(z) for z in blocks.pieces}  # the held-out block was never tokenised


def test_the_graphs_warm_up_and_pretrainings_own_are_one_artifact_in_the_configs_precision(
        tiny_bert: str, tmp_path: Path) -> None:
    """The stage graph runs the warm-up with no placement; pretraining passes its own, built
    from `pretrain.device` and `pretrain.precision`. Both must train in that precision and so
    share one cache entry (the key holds the precision trained in)."""
    store = ArtifactStore(tmp_path / "art")
    rows = [{"block_id": int(r["block_id"]), "doc_id": r["doc_id"], "title": r["title"], "text": r["text"],
             "n_wordpieces": 1, "char_start": 0, "char_end": 1} for r in BLOCKS.to_pylist()]
    with store.write("blocks", "b", config={}, config_hash="c", inputs={}) as w:
        w.table("blocks").write(rows)
    published = store.lookup("blocks", "b")
    assert published is not None
    blocks = published.ref
    config = PretrainConfig(reader_encoder=tiny_bert, heldout_every=1000, precision="bf16",
                            reader_mlm=ReaderMlmConfig(steps=2, batch_size=2, length=32, warmup_steps=1))
    graphs = run_warm_reader(store, blocks, config)
    assert graphs is not None and not graphs.cached
    assert store.open(graphs.ref).manifest["stats"]["precision"] == "bf16"
    pretrainings = run_warm_reader(store, blocks, config, Placement(torch.device("cpu"), "bf16"))
    assert pretrainings is not None and pretrainings.cached and pretrainings.ref.path == graphs.ref.path
    fp32 = run_warm_reader(store, blocks, config.model_copy(update={"precision": "fp32"}))
    assert fp32 is not None and not fp32.cached and fp32.ref.path != graphs.ref.path
