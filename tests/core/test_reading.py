"""The oracle block, reading with and without it, and copy training (realm_core/pretrain/reading.py)."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER
from realm_core.distributed import Placement
from realm_core.pretrain.batches import BlockTexts, reader_batch
from realm_core.pretrain.heldout import SpanLocator, continuation_ids, title_body_wordpieces
from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
from realm_core.pretrain.reader_training import train_reader_steps
from realm_core.pretrain.reading import CopyTraining, oracle_blocks, read_blocks, train_copy_reader
from realm_core.progress import NoProgress
from realm_core.spans.masking import MaskedExample
from tests.killing import KillAfter, Killed

BLOCKS = pa.table({
    "block_id": [0, 1, 2, 3, 4],
    "doc_id": ["a:1", "b:2", "c:3", "d:4", "e:5"],
    "title": ["Ada Lovelace", "ada lovelace", "Thames", "Paris", "Babbage"],
    "text": ["She was born in London", "London was her home", "The Thames flows through London",
             "Paris is not London", "Babbage designed an engine"],
})


def _london(tok) -> MaskedExample:  # type: ignore[no-untyped-def]
    """`[MASK] is big .` with `london` masked, from block 0 (article a:1)."""
    ids = tok("London is big.")["input_ids"]
    return MaskedExample([ids[0], tok.mask_token_id, *ids[2:]], [1], [ids[1]], 0, "a:1", 0)


def test_the_oracle_block_is_the_best_scored_allowed_holder_and_its_rank_counts_allowed_blocks() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    blocks = BlockTexts.from_table(BLOCKS)
    locator = SpanLocator(title_body_wordpieces(blocks, tok), continuation_ids(tok))
    # scores: the query's own block 0 and its article's copy 1 (same title) are trivial
    # retrievals and never count; block 4 holds no `london` but outranks both holders 2 and 3
    scores = np.array([10.0, 9.0, 3.0, 4.0, 5.0], dtype=np.float32)
    vectors = np.diag(scores)                   # (N, D): block z on the z-th axis
    query = np.ones((1, 5), dtype=np.float32)   # (E, D): its score for block z is scores[z]
    got = oracle_blocks([_london(tok)], query, vectors, locator, blocks, "block")
    assert got.block.tolist() == [3]   # the better scored of the two allowed holders
    assert got.rank.tolist() == [2]    # only block 4 ranks above it among allowed blocks
    assert got.holders.tolist() == [2]
    # a span no allowed block holds has no oracle block
    ids = tok("Babbage is big.")["input_ids"]
    alone = MaskedExample([ids[0], tok.mask_token_id, *ids[2:]], [1], [ids[1]], 4, "e:5", 0)
    none = oracle_blocks([alone], query, vectors, locator, blocks, "block")
    assert none.block.tolist() == [-1] and none.rank.tolist() == [0] and none.holders.tolist() == [0]


class _LastWordReader(torch.nn.Module):
    """A reader that predicts, at every masked position, the last word of what it reads."""

    def __init__(self, tok) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.special = torch.tensor(sorted(set(tok.all_special_ids)))
        self.vocab = tok.vocab_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor) -> torch.Tensor:
        b, k, t = input_ids.shape
        word = ~torch.isin(input_ids, self.special) & attention_mask.bool()  # (B, K, T)
        last = (word * torch.arange(t)).argmax(-1)  # (B, K) the last word's position
        ids = input_ids.gather(-1, last.unsqueeze(-1)).squeeze(-1)  # (B, K)
        logits = torch.nn.functional.one_hot(ids, self.vocab).float()  # (B, K, V)
        m = masked_positions.size(1)
        return torch.log_softmax(logits.unsqueeze(2).expand(b, k, m, self.vocab) * 10, dim=-1)


def test_read_blocks_scores_the_null_block_and_the_given_block_apart_as_the_reader_reads_them() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    blocks = BlockTexts.from_table(BLOCKS)
    ex = _london(tok)
    reader = _LastWordReader(tok)
    # read whole: the null row ends in `.` (wrong), block 3 ends in `london` (right, and holds it)
    whole = read_blocks(reader, [ex, ex], np.array([3, 4]), blocks, tok, 64, continuation_ids(tok))
    assert whole.null_correct.tolist() == [False, False]
    assert whole.block_correct.tolist() == [True, False]
    assert whole.block_holds.tolist() == [True, False]
    # cut to 10 wordpieces the reader no longer sees `london` in block 3: wrong, and not held
    cut = read_blocks(reader, [ex], np.array([3]), blocks, tok, 10, continuation_ids(tok))
    assert cut.block_correct.tolist() == [False] and cut.block_holds.tolist() == [False]


class _ReaderElsewhere(torch.nn.Module):
    """A reader whose weights live on another device than the host (meta stands in for a GPU):
    it records the devices its inputs arrive on and predicts wordpiece 0 everywhere."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(1, device="meta"))
        self.vocab = vocab
        self.seen: list[set[str]] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor) -> torch.Tensor:
        self.seen.append({t.device.type for t in (input_ids, attention_mask, masked_positions)})
        b, k, _ = input_ids.shape
        return torch.zeros(b, k, masked_positions.size(1), self.vocab)


def test_read_blocks_feeds_the_reader_on_the_device_its_weights_are_on() -> None:
    # a reader training on a GPU is read there: its inputs must follow it, the verdicts come back
    tok = load_tokenizer(BUNDLED_ENCODER)
    reader = _ReaderElsewhere(tok.vocab_size)
    read = read_blocks(reader, [_london(tok)] * 2, np.array([3, 4]), BlockTexts.from_table(BLOCKS), tok, 64,
                       continuation_ids(tok))
    assert reader.seen == [{"meta"}]
    assert read.null_correct.tolist() == [False, False] and read.block_holds.tolist() == [True, False]


def _copy_setup(tiny_bert: str, steps: int):  # type: ignore[no-untyped-def]
    """Three copies of the `london` example, their evidence blocks (2 and 3 hold `london`), and a
    copy-training config of `steps` steps of 2 that checkpoints every 2."""
    tok = load_tokenizer(tiny_bert)
    config = CopyTraining(steps=steps, batch_size=2, learning_rate=1e-3, reader_length=32, warmup_steps=1,
                          checkpoint_every=2)
    return tok, BlockTexts.from_table(BLOCKS), [_london(tok)] * 3, np.array([2, 3, 2]), config


def test_copy_training_learns_the_evidence_and_a_killed_run_resumes_to_the_same_weights(
        tiny_bert: str, tmp_path: Path) -> None:
    tok, blocks, examples, evidence, config = _copy_setup(tiny_bert, steps=4)

    def train(root: Path, progress) -> KnowledgeAugmentedEncoder:  # type: ignore[no-untyped-def]
        reader = KnowledgeAugmentedEncoder.from_pretrained(tiny_bert, dropout=0.0, seed=0)
        train_copy_reader(reader, examples, evidence, blocks, tok, config, root, Placement.single(), progress)
        return reader

    def log_p(reader: KnowledgeAugmentedEncoder) -> float:
        batch = reader_batch(examples[:1], evidence[:1, None], blocks, tok, 32)
        with torch.no_grad():
            out = reader(batch.input_ids, batch.attention_mask, batch.masked_positions)  # (1, 2, M, V)
        return float(out[0, 1, 0, batch.targets[0, 0]])

    full = train(tmp_path / "a", NoProgress())
    with pytest.raises(Killed):
        train(tmp_path / "b", KillAfter(3))  # step 2's checkpoint is on disk, step 3's is not
    resumed = train(tmp_path / "b", NoProgress())
    x, y = full.state_dict(), resumed.state_dict()
    assert all(torch.equal(x[k], y[k]) for k in x)
    untrained = KnowledgeAugmentedEncoder.from_pretrained(tiny_bert, dropout=0.0, seed=0)
    assert log_p(full) > log_p(untrained) + 0.2  # the span likelier reading its evidence (a sign error lowers it)
    with pytest.raises(ValueError, match="evidence block"):
        train_copy_reader(untrained, examples, np.array([2, -1, 3]), blocks, tok, config, tmp_path / "c",
                          Placement.single(), NoProgress())


def test_copy_training_measures_the_reader_as_it_trains_without_changing_what_it_trains(
        tiny_bert: str, tmp_path: Path) -> None:
    tok, blocks, examples, evidence, config = _copy_setup(tiny_bert, steps=5)

    def train(root: Path, progress, evaluate=None):  # type: ignore[no-untyped-def]
        reader = KnowledgeAugmentedEncoder.from_pretrained(tiny_bert, dropout=0.1, seed=0)

        def measure(model: KnowledgeAugmentedEncoder) -> dict[str, float]:
            assert model is reader and not model.training and not torch.is_grad_enabled()
            read = read_blocks(model, examples[:1], evidence[:1], blocks, tok, 32, continuation_ids(tok))
            return {"heldout_oracle_accuracy": float(read.block_correct.mean())}

        curve = train_copy_reader(reader, examples, evidence, blocks, tok, config, root, Placement.single(), progress,
                                  measure if evaluate else None, 2)
        return reader, curve

    plain, plain_curve = train(tmp_path / "a", NoProgress())
    measured, curve = train(tmp_path / "b", NoProgress(), evaluate=True)
    # measured after steps 2, 4 and the last (5), in those rows only; dropout on, weights the same
    assert [r["step"] for r in curve if "heldout_oracle_accuracy" in r] == [2.0, 4.0, 5.0]
    assert not any("heldout_oracle_accuracy" in r for r in plain_curve)
    x, y = plain.state_dict(), measured.state_dict()
    assert all(torch.equal(x[k], y[k]) for k in x)
    # killed after step 3: the resumed run keeps step 2's measurement from its checkpoint
    with pytest.raises(Killed):
        train(tmp_path / "c", KillAfter(3), evaluate=True)
    _, resumed = train(tmp_path / "c", NoProgress(), evaluate=True)
    assert [r.get("heldout_oracle_accuracy") for r in resumed] == [r.get("heldout_oracle_accuracy") for r in curve]
    with pytest.raises(ValueError, match="eval_every"):
        train_reader_steps(plain, config, lambda step: (torch.zeros(()), {}), tmp_path / "d", NoProgress(),
                           Placement.single(), "copy", "stop", lambda model: {}, 0)
