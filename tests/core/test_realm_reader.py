import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER, PretrainConfig
from realm_core.pretrain import loop
from realm_core.pretrain.batches import BlockTexts, reader_batch, retrieve_candidates
from realm_core.pretrain.loop import (
    PretrainData,
    RealmModels,
    batch_metrics,
    evaluate,
    realm_forward,
)
from realm_core.pretrain.reader import KnowledgeAugmentedEncoder, marginal_likelihood
from realm_core.pretrain.refresh import IndexHandle
from realm_core.retrieval.embed import embed_texts
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.index import MipsIndex
from realm_core.spans.masking import MaskedExample


def test_marginal_likelihood_is_logsumexp_of_prior_plus_reader() -> None:
    # B=1, K=3 (null, z1, empty slot), M=2 masked tokens, V=2
    p = torch.tensor([[[0.5, 0.5], [0.9, 0.1]], [[0.2, 0.8], [0.6, 0.4]], [[0.3, 0.7], [0.3, 0.7]]])
    token_log_probs = p.log().unsqueeze(0)  # (1, 3, 2, 2)
    targets = torch.tensor([[1, 0]])
    scores = torch.tensor([[0.0, math.log(3.0), 5.0]])
    block_mask = torch.tensor([[True, True, False]])
    out = marginal_likelihood(token_log_probs, targets, torch.tensor([[True, True]]), scores, block_mask)
    # p(z|x) = (1/4, 3/4) over the two real slots; p(y|x,z) = 0.5*0.9 and 0.8*0.6
    expected = math.log(0.25 * 0.45 + 0.75 * 0.48)
    assert float(out.log_p_y[0]) == pytest.approx(expected, abs=1e-6)
    assert float(out.loss) == pytest.approx(-expected, abs=1e-6)
    assert out.log_p_z[0, 2] == float("-inf")
    # a masked-out target position does not count
    half = marginal_likelihood(token_log_probs, targets, torch.tensor([[True, False]]), scores, block_mask)
    assert float(half.log_p_y[0]) == pytest.approx(math.log(0.25 * 0.5 + 0.75 * 0.8), abs=1e-6)


def test_a_fixed_null_weight_keeps_the_retrievers_gradient_off_the_null_block() -> None:
    # B=2, K=3 (null, z1, z2), M=1, V=2: the reader gets y right reading the null block alone
    # (0.9) and wrong reading either retrieved block (0.2 and 0.4)
    p_y = torch.tensor([[0.9, 0.2, 0.4], [0.9, 0.2, 0.4]])
    token_log_probs = torch.stack([p_y, 1 - p_y], dim=-1).log().unsqueeze(2)  # (2, 3, 1, 2)
    targets, target_mask = torch.tensor([[0], [0]]), torch.tensor([[True], [True]])
    block_mask = torch.tensor([[True, True, True], [True, False, False]])  # the second: nothing retrieved
    scores = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]], requires_grad=True)
    # REALM's own prior: the gradient raises the null block's score, where the reader does best
    marginal_likelihood(token_log_probs, targets, target_mask, scores, block_mask).loss.backward()
    assert scores.grad is not None and float(scores.grad[0, 0]) < 0
    scores.grad = None
    out = marginal_likelihood(token_log_probs, targets, target_mask, scores, block_mask, null_weight=0.25)
    out.loss.backward()
    assert scores.grad is not None
    # p(null|x) is 0.25 and the retrieved blocks share 0.75 equally (equal scores); nothing retrieved:
    # the null block alone
    assert out.log_p_z[0].detach().exp().tolist() == pytest.approx([0.25, 0.375, 0.375])
    assert out.log_p_z[1].detach().exp().tolist() == pytest.approx([1.0, 0.0, 0.0])
    assert float(out.log_p_y[0].detach()) == pytest.approx(math.log(0.25 * 0.9 + 0.375 * 0.2 + 0.375 * 0.4),
                                                          abs=1e-6)
    # no gradient on the null block's score; the better retrieved block (z2: 0.4) is raised against
    # z1 by as much as z1 is lowered; the example with nothing retrieved moves no score
    assert float(scores.grad[0, 0]) == 0 and float(scores.grad[0, 2]) < 0 < float(scores.grad[0, 1])
    assert float(scores.grad[0, 1] + scores.grad[0, 2]) == pytest.approx(0, abs=1e-7)
    assert scores.grad[1].abs().sum() == 0 and torch.isfinite(scores.grad).all()


BLOCKS = pa.table({"block_id": [0, 1, 2, 3], "doc_id": ["a:1", "a:1", "b:2", "c:3"],
                   "title": ["Ada Lovelace", "Ada Lovelace", "ada lovelace", "Charles Babbage"],
                   "text": ["Ada wrote the first program.", "She was born in London.",
                            "Ada Lovelace was a mathematician.", "Babbage designed the Analytical Engine."]})


def _example(tok, text: str, block_id: int) -> MaskedExample:  # type: ignore[no-untyped-def]
    ids = tok(text)["input_ids"]
    return MaskedExample([ids[0], tok.mask_token_id, *ids[2:]], [1], [ids[1]], block_id,
                         str(BLOCKS["doc_id"][block_id]), 0)


def test_trivial_retrievals_are_dropped_by_block_or_by_article() -> None:
    blocks = BlockTexts.from_table(BLOCKS)
    tok = load_tokenizer(BUNDLED_ENCODER)
    ex = _example(tok, "London is big.", 1)
    # block 1 is the query's own; block 2 is its article in another corpus (same title); block 0
    # is another block of its own article: kept by REALM's rule, dropped by the article rule
    got = retrieve_candidates(np.array([[1, 0, 2, 3, -1]]), [ex], blocks, 3)
    assert got.tolist() == [[0, 3, -1]]
    got = retrieve_candidates(np.array([[1, 0, 2, 3, -1]]), [ex], blocks, 2, exclusion="article")
    assert got.tolist() == [[3, -1]]


def test_reader_layout_is_query_then_block() -> None:
    blocks = BlockTexts.from_table(BLOCKS)
    tok = load_tokenizer(BUNDLED_ENCODER)
    ex = _example(tok, "London is big.", 1)
    batch = reader_batch([ex], np.array([[3, -1]]), blocks, tok, reader_length=12)
    rows = batch.input_ids[0]
    null = tok.convert_ids_to_tokens(rows[0][batch.attention_mask[0][0].bool()])
    assert null == ["[CLS]", "[MASK]", "is", "big", ".", "[SEP]"]
    z = tok.convert_ids_to_tokens(rows[1][batch.attention_mask[0][1].bool()])
    title, body = tok.tokenize("Charles Babbage"), tok.tokenize("Babbage designed the Analytical Engine.")
    expected = [*null, *title, "[SEP]", *body][:11] + ["[SEP]"]  # cut to reader_length, closed
    assert z == expected
    assert batch.block_mask.tolist() == [[True, True, False]]
    assert batch.masked_positions.tolist() == [[1]] and batch.targets.tolist() == [[ex.targets[0]]]


@dataclass
class Setup:
    models: RealmModels
    index: MipsIndex
    vectors: np.ndarray
    data: PretrainData
    example: MaskedExample


@pytest.fixture
def setup() -> Setup:
    """Fresh encoders and reader (the tests backpropagate) over the four BLOCKS, indexed."""
    torch.manual_seed(0)
    tok = load_tokenizer(BUNDLED_ENCODER)
    q = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 16, seed=0, dropout=0.0)
    d = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 16, seed=0, dropout=0.0)
    vectors = embed_texts(d, tok, BLOCKS["title"].to_pylist(), BLOCKS["text"].to_pylist(), 32, 4)
    index = MipsIndex.build(16, "Flat")
    index.add(vectors, np.arange(4))
    models = RealmModels(KnowledgeAugmentedEncoder.from_pretrained(BUNDLED_ENCODER, dropout=0.0), q, d)
    return Setup(models, index, vectors, PretrainData([], [], BlockTexts.from_table(BLOCKS), tok),
                 _example(tok, "Ada was a mathematician in London.", 1))


def test_gradients_reach_the_reader_and_both_retriever_encoders(setup: Setup) -> None:
    config = PretrainConfig(top_k=3, reader_length=32, doc_length=32, exclusion_margin=2, exclusion="article")
    # the step's host side is labelled for torch.profiler (bench/gpu.py times it so)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, batch, scores = realm_forward(setup.models, [setup.example], IndexHandle(setup.index, 0), setup.data,
                                           config)
    out.loss.backward()
    assert batch.block_ids[0].tolist() == [-1, 3, -1]  # own article (blocks 0-2) excluded
    host = {e.key: e for e in prof.key_averages() if e.key.startswith("realm.")}
    assert set(host) == {"realm.search", "realm.batching"} and all(e.cpu_time_total > 0 for e in host.values())
    for module in setup.models.modules().values():
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    metrics = batch_metrics(out, batch, scores)
    assert 0.0 <= metrics["p_null"] <= 1.0 and metrics["span_accuracy"] in (0.0, 1.0)


def test_index_relevance_uses_the_stored_vectors_and_trains_the_query_encoder(setup: Setup) -> None:
    index, vectors, ex = setup.index, setup.vectors, setup.example
    assert np.array_equal(index.reconstruct(np.array([[3, -1]])), np.stack([vectors[3], np.zeros(16)])[None])
    config = PretrainConfig(top_k=3, reader_length=32, doc_length=32, exclusion_margin=2, relevance="index",
                            exclusion="article")
    out, batch, scores = realm_forward(setup.models, [ex], IndexHandle(index, 0), setup.data, config)
    q = setup.models.query_encoder
    with torch.no_grad():
        query = q(torch.tensor([ex.input_ids]), torch.ones(1, len(ex.input_ids), dtype=torch.long))
    # blocks 0-2 are the query's own article (doc id or title): only block 3 is left to retrieve
    assert batch.block_ids[0].tolist() == [-1, 3, -1]
    expected = float(query[0] @ torch.from_numpy(vectors[3]))
    assert scores[0, 1].item() == pytest.approx(expected, abs=1e-4)
    out.loss.backward()
    assert any(float(p.grad.abs().sum()) > 0 for p in q.parameters() if p.grad is not None)


def test_a_null_weight_step_holds_p_null_and_trains_both_encoders(setup: Setup) -> None:
    """`pretrain.null_weight` through the step: p(null|x) is the weight in the marginal and its
    metrics, and the retrieved blocks' ranking still trains both encoders."""
    config = PretrainConfig(top_k=3, reader_length=32, doc_length=32, exclusion_margin=2, null_weight=0.25)
    out, batch, scores = realm_forward(setup.models, [setup.example], IndexHandle(setup.index, 0), setup.data,
                                          config)
    assert bool(batch.block_mask[0, 1:].all())  # two blocks retrieved beside the null block
    assert float(out.log_p_z[0, 0].detach().exp()) == pytest.approx(0.25)
    assert batch_metrics(out, batch, scores)["p_null"] == pytest.approx(0.25)
    # p(z|x) on the retrieved blocks that hold the span: the retriever's share for the evidence
    p_z = out.log_p_z[0].detach().exp()
    one, both = np.array([[False, True, False]]), np.array([[False, True, True]])
    assert batch_metrics(out, batch, scores, one)["p_holder"] == pytest.approx(float(p_z[1]), abs=1e-6)
    assert batch_metrics(out, batch, scores, both)["p_holder"] == pytest.approx(0.75, abs=1e-6)
    assert batch_metrics(out, batch, scores, both)["answer_retrieved"] == 1.0
    assert batch_metrics(out, batch, scores)["p_holder"] == batch_metrics(out, batch, scores)["answer_retrieved"] == 0.0
    # the null block's score is fixed, not embedded; the retrieved blocks score as without the weight
    handle = IndexHandle(setup.index, 0)
    for relevance in ("recompute", "index"):
        unweighted = config.model_copy(update={"null_weight": None, "relevance": relevance})
        _, paper_batch, paper_scores = realm_forward(setup.models, [setup.example], handle, setup.data, unweighted)
        _, _, fixed = realm_forward(setup.models, [setup.example], handle, setup.data,
                                       unweighted.model_copy(update={"null_weight": 0.25}))
        assert float(fixed[0, 0]) == 0.0 and float(paper_scores[0, 0]) != 0.0
        assert paper_batch.block_ids.tolist() == batch.block_ids.tolist()
        assert torch.allclose(fixed[:, 1:], paper_scores[:, 1:])
    out.loss.backward()
    for encoder in (setup.models.query_encoder, setup.models.doc_encoder):
        assert any(float(p.grad.abs().sum()) > 0 for p in encoder.parameters() if p.grad is not None)


def test_block_wordpieces_are_tokenised_once_and_the_cache_is_bounded() -> None:
    from realm_core.pretrain.batches import block_wordpieces

    blocks = BlockTexts.from_table(BLOCKS)
    blocks.max_cached = 2
    tok = load_tokenizer(BUNDLED_ENCODER)
    titles, bodies = block_wordpieces([3, 0, 3], blocks, tok)
    assert bodies[0] == bodies[2] == tok("Babbage designed the Analytical Engine.", add_special_tokens=False)["input_ids"]
    assert titles[1] == tok("Ada Lovelace", add_special_tokens=False)["input_ids"]
    block_wordpieces([1], blocks, tok)
    assert list(blocks.pieces) == [3, 1]  # block 0, least recently used, was dropped


def test_bf16_autocast_step_tracks_the_fp32_step(setup: Setup) -> None:
    # the GPU path's precision, exercised on the CPU: same retrievals, loss within bf16 rounding
    from realm_core.distributed import Placement

    config = PretrainConfig(top_k=3, reader_length=32, doc_length=32, exclusion_margin=2)
    handle = IndexHandle(setup.index, 0)
    fp32, batch32, _ = realm_forward(setup.models, [setup.example], handle, setup.data, config)
    bf16, batch16, scores = realm_forward(setup.models, [setup.example], handle, setup.data,
                                          config.model_copy(update={"precision": "bf16"}),
                                          Placement(torch.device("cpu"), "bf16"))
    assert batch16.block_ids.tolist() == batch32.block_ids.tolist()
    assert scores.dtype == torch.float32 and bf16.token_log_probs.dtype == torch.float32
    assert bf16.loss.item() == pytest.approx(fp32.loss.item(), rel=0.05)
    assert bf16.loss.item() != fp32.loss.item()  # the autocast really ran in bf16
    bf16.loss.backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in setup.models.reader.parameters())


def test_heldout_evaluation_reads_a_micro_batch_at_a_time_with_the_same_metrics(
        setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out evaluation holds one training micro-batch's activations at once (its memory
    peak), and its metrics and per-example rows do not depend on how it is cut."""
    tok = setup.data.tokenizer
    held = [_example(tok, t, b) for t, b in [("Ada was a mathematician in London.", 1),
                                            ("Babbage designed an engine.", 0),
                                            ("London is a city.", 2), ("Ada wrote programs.", 3),
                                            ("Charles Babbage was born in London.", 1)]]
    data = PretrainData([], held, setup.data.blocks, tok)
    sizes: list[int] = []
    forward = loop.realm_forward

    def counted(models, chunk, *args, **kwargs):  # type: ignore[no-untyped-def]
        sizes.append(len(chunk))
        return forward(models, chunk, *args, **kwargs)

    monkeypatch.setattr(loop, "realm_forward", counted)
    runs = {}
    for accumulation in (1, 2):
        config = PretrainConfig(top_k=3, reader_length=32, doc_length=32, batch_size=4,
                                grad_accumulation=accumulation)
        rows: list[dict[str, float]] = []
        sizes.clear()
        runs[accumulation] = evaluate(setup.models, data, IndexHandle(setup.index, 0), config, 5, per_example=rows), \
            rows, list(sizes)
    (whole, whole_rows, whole_sizes), (parts, part_rows, part_sizes) = runs[1], runs[2]
    assert whole_sizes == [4, 1] and part_sizes == [2, 2, 1]
    assert whole.keys() == parts.keys() and whole["examples"] == 5.0
    for k in whole:
        assert parts[k] == pytest.approx(whole[k], abs=1e-5), k
    for a, b in zip(whole_rows, part_rows, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
