from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER, ICTConfig
from realm_core.errors import InputError
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.inverse_cloze import (
    LossPoint,
    PaddedBatches,
    cloze_corpus,
    inverse_cloze_batch,
    train_inverse_cloze,
)

TEXTS = ["Ada wrote the first program. She worked with Babbage. Short.",
         "Only one sentence lives in this block here.",
         "Paris is the capital of France. The Seine flows through Paris in the north."]


def _tables(texts: list[str]) -> tuple[pa.Table, pa.Table]:
    blocks = pa.table({"block_id": list(range(len(texts))), "title": [f"T{i}" for i in range(len(texts))],
                       "text": texts})
    rows = []
    for b, text in enumerate(texts):
        start = 0
        for s, part in enumerate(text.split(". ")):
            end = start + len(part) + (1 if not part.endswith(".") else 0)
            rows.append({"block_id": b, "sentence": s, "char_start": start, "char_end": end})
            start = end + 1
    return blocks, pa.Table.from_pylist(rows)


def test_corpus_keeps_blocks_with_context_left_and_long_enough_queries() -> None:
    blocks, sentences = _tables(TEXTS)
    corpus = cloze_corpus(blocks, sentences, min_sentence_chars=10)
    assert corpus.block_ids.tolist() == [0, 2]  # block 1 has a single sentence
    # "Short." is too short to be a query, but still part of block 0's context
    queries = [TEXTS[0][a:z] for a, z in zip(corpus.starts[:2], corpus.ends[:2], strict=True)]
    assert queries == ["Ada wrote the first program.", "She worked with Babbage."]
    assert corpus.sentence_offsets.tolist() == [0, 2, 4]


def test_batch_removes_the_query_from_its_context_unless_kept() -> None:
    corpus = cloze_corpus(*_tables(TEXTS), min_sentence_chars=10)
    queries, titles, contexts = inverse_cloze_batch(corpus, 2, 0.0, np.random.default_rng(0))
    assert sorted(titles) == ["T0", "T2"]  # distinct blocks: no block is its own negative
    for q, c in zip(queries, contexts, strict=True):
        assert q not in c and len(c) > 0
    _, _, kept = inverse_cloze_batch(corpus, 2, 1.0, np.random.default_rng(0))
    assert sorted(kept) == sorted([TEXTS[0], TEXTS[2]])


def test_padded_batches_give_the_hf_calls_ids_and_masks() -> None:
    """The loop's tokenising equals `tokenizer(..., truncation, max_length, padding=True)`: pairs
    cut in the second text only, single texts cut, short rows padded, on a private backend (the
    shared tokenizer's settings are left as they were)."""
    tok = load_tokenizer(BUNDLED_ENCODER)
    long_body = " ".join(TEXTS * 6)  # well past 24 wordpieces
    # a title longer than the body's share: only the body is cut (longest-first would cut both)
    title = "Ada Lovelace the first programmer of the analytical engine of Charles Babbage"
    titles, bodies = [title, "T", "Paris"], [long_body, TEXTS[1], "Short."]
    want = tok(titles, bodies, truncation="only_second", max_length=24, padding=True, return_tensors="pt")
    want_q = tok(bodies, truncation=True, max_length=12, padding=True, return_tensors="pt")
    shared = (tok.backend_tokenizer.truncation, tok.backend_tokenizer.padding)
    got_q = PaddedBatches(tok, 12)(bodies)
    got = PaddedBatches(tok, 24, "only_second")(list(zip(titles, bodies, strict=True)))  # unlike the last call's
    assert (tok.backend_tokenizer.truncation, tok.backend_tokenizer.padding) == shared
    for w, g in ((want, got), (want_q, got_q)):
        assert set(g) == {"input_ids", "attention_mask"}
        for key in g:
            assert g[key].dtype == torch.int64 and torch.equal(g[key], w[key]), key
    assert got["input_ids"].shape == (3, 24) and got["attention_mask"][2].sum() < 24  # padded
    title_ids = tok(title, add_special_tokens=False)["input_ids"]
    assert got["input_ids"][0, 1:1 + len(title_ids)].tolist() == title_ids


def test_no_usable_block_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="at least two sentences"):
        cloze_corpus(*_tables([TEXTS[1]]), min_sentence_chars=10)


class Killed(Exception):
    pass


def _train(tmp_path: Path, steps: int, kill_at: int | None = None) -> tuple[RetrieverEncoder, RetrieverEncoder, list]:  # type: ignore[type-arg]
    texts = [f"{name} was born in {city}. {name} later moved to {other} for work. {name} died there."
             for name, city, other in [("Ada", "London", "Paris"), ("Alan", "Maida Vale", "Manchester"),
                                       ("Grace", "New York", "Arlington"), ("Kurt", "Brno", "Vienna")]]
    corpus = cloze_corpus(*_tables(texts), min_sentence_chars=10)
    cfg = ICTConfig(batch_size=3, steps=steps, query_length=16, block_length=32, dropout=0.1,
                    learning_rate=1e-3, checkpoint_every=2, projection_dim=8, log_every=1)
    q = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 8, "cls", 0, dropout=0.1)
    d = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 8, "cls", 0, dropout=0.1)

    def kill(point: LossPoint) -> None:
        if point.step == kill_at:
            raise Killed  # dies after the step-2 checkpoint, before step 3's is written

    curve = train_inverse_cloze(corpus, q, d, load_tokenizer(BUNDLED_ENCODER), cfg, tmp_path / "ckpt",
                                on_log=kill)
    return q, d, curve


def test_a_resumed_run_ends_with_the_parameters_of_an_uninterrupted_one(tmp_path: Path) -> None:
    q_full, d_full, curve_full = _train(tmp_path / "full", 4)
    # "killed" after step 2 (its checkpoint is on disk), then the same command again
    with pytest.raises(Killed):
        _train(tmp_path / "resumed", 4, kill_at=3)
    q_res, d_res, curve_res = _train(tmp_path / "resumed", 4)
    assert [p.step for p in curve_res] == [1, 2, 3, 4]
    assert [p.loss for p in curve_res] == pytest.approx([p.loss for p in curve_full], abs=1e-6)
    for a, b in ((q_full, q_res), (d_full, d_res)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=0, msg=name)
    assert q_full.step == 4 and not torch.equal(q_full.projection.weight, d_full.projection.weight)


def _grads(modules: tuple[RetrieverEncoder, RetrieverEncoder]) -> list[torch.Tensor]:
    return [p.grad.clone() for m in modules for p in m.parameters() if p.grad is not None]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_micro_batches_give_the_whole_batch_gradients(dropout: float) -> None:
    """GradCache: the loss and every gradient of a step in micro-batches of 2 equal those of the
    same forward passes held in one graph. With dropout that needs each micro-batch's second
    forward to replay its first's masks; without dropout it is also the plain whole-batch step."""
    from realm_core.retrieval.inverse_cloze import in_batch_loss, inverse_cloze_step

    tok = load_tokenizer(BUNDLED_ENCODER)
    queries = tok([f"who was born in city {i}?" for i in range(5)], padding=True, return_tensors="pt")
    blocks = tok([f"T{i}" for i in range(5)], [f"person {i} was born in city {i} long ago." for i in range(5)],
                 padding=True, return_tensors="pt")
    encoders = tuple(RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 8, "cls", 0, dropout=dropout).train()
                     for _ in range(2))
    q_enc, d_enc = encoders

    def run(micro: int) -> tuple[float, list[torch.Tensor]]:
        for m in encoders:
            m.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        if micro == -1:  # reference: the micro-batches' forwards, in the same order, in one graph
            q_parts, d_parts = [], []
            for s in range(0, 5, 2):
                q_parts.append(q_enc(queries["input_ids"][s:s + 2], queries["attention_mask"][s:s + 2]))
                d_parts.append(d_enc(blocks["input_ids"][s:s + 2], blocks["attention_mask"][s:s + 2]))
            loss, _ = in_batch_loss(torch.cat(q_parts), torch.cat(d_parts))
            loss.backward()
        else:
            loss, _ = inverse_cloze_step(q_enc, d_enc, queries, blocks, micro)
        return float(loss.detach()), _grads(encoders)

    ref_loss, ref = run(-1)
    loss, got = run(2)
    assert loss == pytest.approx(ref_loss, abs=1e-6) and len(got) == len(ref) > 0
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    if dropout == 0.0:
        whole_loss, whole = run(0)
        assert whole_loss == pytest.approx(ref_loss, abs=1e-6)
        for a, b in zip(whole, ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    else:  # and the masks matter: another draw gives other gradients
        torch.manual_seed(8)
        for m in encoders:
            m.zero_grad(set_to_none=True)
        inverse_cloze_step(q_enc, d_enc, queries, blocks, 2)
        assert any(not torch.allclose(a, b, atol=1e-5) for a, b in zip(_grads(encoders), ref, strict=True))


def test_a_placement_sets_the_forwards_precision_and_the_weights_stay_fp32(tmp_path: Path) -> None:
    """The paper preset trains ICT on a GPU in bf16 autocast; on the CPU the same code path runs
    (the placement's device is the CPU here), its losses close to but not equal to fp32's."""
    import math

    from realm_core.distributed import Placement

    texts = [f"{n} was born in {c}. {n} later moved to {o} for work." for n, c, o in
             [("Ada", "London", "Paris"), ("Alan", "Maida Vale", "Manchester"), ("Kurt", "Brno", "Vienna")]]
    corpus = cloze_corpus(*_tables(texts), min_sentence_chars=10)
    cfg = ICTConfig(batch_size=3, steps=2, query_length=16, block_length=32, dropout=0.0, learning_rate=1e-3,
                    checkpoint_every=5, projection_dim=8, micro_batch=2)
    losses = {}
    for precision in ("fp32", "bf16"):
        q = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 8, "cls", 0)
        d = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 8, "cls", 0)
        curve = train_inverse_cloze(corpus, q, d, load_tokenizer(BUNDLED_ENCODER), cfg, tmp_path / precision,
                                    placement=Placement(torch.device("cpu"), precision))  # type: ignore[arg-type]
        losses[precision] = [p.loss for p in curve]
        assert all(math.isfinite(x) for x in losses[precision])
        assert {p.dtype for p in q.parameters()} == {torch.float32}
    # the first step's loss, before either has moved: bf16 rounding only
    assert losses["bf16"][0] == pytest.approx(losses["fp32"][0], abs=0.02) and losses["bf16"][0] != losses["fp32"][0]
