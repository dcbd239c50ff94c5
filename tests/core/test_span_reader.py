import math
from pathlib import Path

import pytest
import torch

from realm_core.distributed import Placement
from realm_core.openqa.span_reader import (
    SpanReader,
    SpanScorer,
    gold_spans,
    read_by_length,
    span_marginal_likelihood,
)


def test_gold_spans_match_every_occurrence_inside_the_block_only() -> None:
    row = [101, 7, 102, 5, 6, 9, 5, 6, 102]  # [CLS] q [SEP] block... [SEP]
    body = [False, False, False, True, True, True, True, True, False]
    gold = gold_spans(row, body, [[5, 6], [7]], max_span_length=3)
    assert gold.nonzero().tolist() == [[3, 1], [6, 1]]  # "5 6" twice; "7" is in the question


def test_spans_never_leave_the_block_body() -> None:
    torch.manual_seed(0)
    scorer = SpanScorer(hidden=4, max_span_length=2)
    hidden = torch.randn(1, 1, 5, 4)
    body = torch.tensor([[[False, True, True, False, True]]])
    scores = scorer(hidden, body)  # (1, 1, 5, 2)
    finite = torch.isfinite(scores[0, 0]).nonzero().tolist()
    assert finite == [[1, 0], [1, 1], [2, 0], [4, 0]]  # (start, length-1); 2-3 crosses [SEP]


def test_marginal_over_blocks_and_matching_spans() -> None:
    # B=1, K=2, T=2, L=1: block 0 spans scores (0, log 3), block 1 (0, 0)
    scores = torch.tensor([[[[0.0], [math.log(3.0)]], [[0.0], [0.0]]]])
    gold = torch.tensor([[[[False], [True]], [[True], [True]]]])
    log_p_z = torch.log(torch.tensor([[0.25, 0.75]]))
    got = span_marginal_likelihood(scores, gold, log_p_z)
    # p(y|z0) = 3/4, p(y|z1) = 1 (both spans match)
    assert float(got[0]) == pytest.approx(math.log(0.25 * 0.75 + 0.75 * 1.0), abs=1e-6)
    none = span_marginal_likelihood(scores, torch.zeros_like(gold), log_p_z)
    assert float(none[0]) == float("-inf")


def test_joint_softmax_over_block_span_pairs_by_hand() -> None:
    """ORQA's form: one softmax over every (block, span) of S(s) + log p(z|x). Same example:
    the pairs weigh 0.25*1, 0.25*3, 0.75*1, 0.75*1 (total 2.5); the gold ones 0.75 + 0.75 + 0.75."""
    scores = torch.tensor([[[[0.0], [math.log(3.0)]], [[0.0], [0.0]]]])
    gold = torch.tensor([[[[False], [True]], [[True], [True]]]])
    log_p_z = torch.log(torch.tensor([[0.25, 0.75]]))
    got = span_marginal_likelihood(scores, gold, log_p_z, form="joint")
    assert float(got[0]) == pytest.approx(math.log(2.25 / 2.5), abs=1e-6)
    # a block's answer counts against the other block's spans: raising block 1's non-gold...
    only_b0 = torch.tensor([[[[False], [True]], [[False], [False]]]])
    assert float(span_marginal_likelihood(scores, only_b0, log_p_z, form="joint")[0]) == pytest.approx(
        math.log(0.75 / 2.5), abs=1e-6)
    # ...while per block, block 0's spans sum to one whatever block 1 offers
    assert float(span_marginal_likelihood(scores, only_b0, log_p_z)[0]) == pytest.approx(
        math.log(0.25 * 0.75), abs=1e-6)
    with pytest.raises(ValueError, match="per_block or joint"):
        span_marginal_likelihood(scores, gold, log_p_z, form="other")


def test_decomposed_first_layer_equals_the_mlp_on_concatenated_states() -> None:
    torch.manual_seed(1)
    scorer = SpanScorer(hidden=6, max_span_length=3)
    hidden = torch.randn(2, 2, 7, 6)
    body = torch.ones(2, 2, 7, dtype=torch.bool)
    scores = scorer(hidden, body)  # (2, 2, 7, 3)
    for start, length in ((0, 0), (2, 2), (4, 1)):
        pair = torch.cat([hidden[:, :, start], hidden[:, :, start + length]], dim=-1)
        assert torch.allclose(scores[:, :, start, length], scorer.mlp(pair).squeeze(-1), atol=1e-5)


def test_training_recomputes_span_scores_with_the_same_values_and_gradients() -> None:
    # in training the head keeps no per-length activation (each length's scores are recomputed
    # in the backward); scores and gradients are those of the plain forward, which eval mode runs
    torch.manual_seed(2)
    scorer = SpanScorer(hidden=8, max_span_length=4)
    hidden = torch.randn(2, 3, 9, 8)
    body = torch.rand(2, 3, 9) > 0.2
    weights = torch.randn(2, 3, 9, 4)
    grads, saved = {}, {}
    for mode in ("train", "eval"):
        scorer.train(mode == "train")
        h = hidden.clone().requires_grad_(True)
        scorer.zero_grad()
        kept: list[int] = []  # bytes of each tensor the forward keeps for the backward

        def pack(t: torch.Tensor, kept: list[int] = kept) -> torch.Tensor:
            kept.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            scores = scorer(h, body)
        saved[mode] = sum(kept)
        (scores.masked_fill(~torch.isfinite(scores), 0.0) * weights).sum().backward()
        grads[mode] = (scores.detach(), h.grad, [p.grad.clone() for p in scorer.parameters()])
    # the memory property itself: training keeps less than one per-length activation per length
    per_length = hidden.numel() * hidden.element_size()
    assert saved["train"] < saved["eval"] - (4 - 1) * per_length, saved
    assert torch.equal(grads["train"][0], grads["eval"][0])
    assert torch.allclose(grads["train"][1], grads["eval"][1], atol=1e-6)
    for a, b in zip(grads["train"][2], grads["eval"][2], strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_reading_by_length_equals_one_padded_forward(tiny_bert: str) -> None:
    """Rows read longest first in chunks padded to their own longest give the scores of one
    forward over every row padded to the batch's longest."""
    reader = SpanReader.from_pretrained(tiny_bert, 3, seed=0).eval()
    torch.manual_seed(0)
    b, k, t = 3, 2, 16
    ids = torch.randint(1000, 2000, (b, k, t))
    lengths = torch.tensor([[16, 5], [9, 12], [7, 16]])
    mask = (torch.arange(t) < lengths[..., None]).long()
    ids = ids * mask
    body = (torch.arange(t) >= 3) & mask.bool()
    body &= torch.arange(t) < (lengths[..., None] - 1)
    types = torch.zeros_like(ids)
    with torch.inference_mode():
        whole = reader(ids, mask, body, types)
        for row_tokens in (1, 20, 40, 10**6):
            sorted_read = read_by_length(reader, ids, mask, body, types, row_tokens)
            assert torch.equal(torch.isfinite(sorted_read), torch.isfinite(whole))
            finite = torch.isfinite(whole)
            assert torch.allclose(sorted_read[finite], whole[finite], atol=1e-5)


def test_no_nan_gradient_from_questions_or_blocks_without_a_gold_span() -> None:
    torch.manual_seed(0)
    scores = torch.randn(2, 2, 4, 2, requires_grad=True)
    masked = scores.masked_fill(torch.tensor([False, False, True, True]).view(1, 1, 4, 1), float("-inf"))
    gold = torch.zeros(2, 2, 4, 2, dtype=torch.bool)
    gold[0, 1, 0, 0] = True  # question 0: one gold span in block 1; question 1: none at all
    log_p_z = torch.log_softmax(torch.randn(2, 2, requires_grad=True), dim=-1)
    got = span_marginal_likelihood(masked, gold, log_p_z)
    assert torch.isfinite(got[0]) and got[1] == float("-inf")
    (-got[torch.isfinite(got)].sum()).backward()
    assert scores.grad is not None and torch.isfinite(scores.grad).all()
    assert scores.grad[1].abs().sum() == 0  # the question without gold teaches nothing



def test_span_scores_stay_fp32_under_bf16_autocast(tiny_bert: str) -> None:
    """The encoder's products run in bf16 under `precision: bf16`; the span scores, compared and
    normalised across every span of K blocks, come from an fp32 scorer."""
    reader = SpanReader.from_pretrained(tiny_bert, 3, seed=0).eval()
    torch.manual_seed(0)
    ids = torch.randint(1000, 2000, (2, 2, 12))
    mask, body = torch.ones_like(ids), torch.zeros(2, 2, 12, dtype=torch.bool)
    body[..., 4:11] = True
    with torch.inference_mode():
        fp32 = reader(ids, mask, body)
        with Placement(torch.device("cpu"), "bf16").compute():
            bf16 = reader(ids, mask, body)
    assert fp32.dtype == bf16.dtype == torch.float32
    finite = torch.isfinite(fp32)
    assert torch.equal(finite, torch.isfinite(bf16))
    assert torch.allclose(bf16[finite], fp32[finite], atol=0.1) and not torch.equal(bf16, fp32)


@pytest.mark.parametrize("damage", ["header length", "header text", "truncated tensors"])
def test_damaged_safetensors_are_a_corrupt_artifact_error_naming_the_folder(
        tiny_bert: str, tmp_path: Path, damage: str) -> None:
    """A reader or retriever whose weights file is damaged is refused with the folder named, as
    the CLI's `error:` and the service's 503 need, not the library's own error from deep inside."""
    import shutil
    import struct

    from realm_core.errors import CorruptArtifactError
    from realm_core.retrieval.encoders import RetrieverEncoder

    saved = tmp_path / "reader"
    SpanReader.from_pretrained(tiny_bert, max_span_length=3).save_pretrained(saved)
    encoder = tmp_path / "encoder"
    shutil.copytree(tiny_bert, encoder)
    for folder in (saved, encoder):
        weights = folder / "model.safetensors"
        data = bytearray(weights.read_bytes())
        if damage == "header length":
            data[:8] = struct.pack("<Q", 2**40)  # a header longer than the file
        elif damage == "header text":
            data[8:16] = b"\xff" * 8  # no longer JSON
        else:
            data = data[: len(data) // 2]
        weights.write_bytes(bytes(data))
    with pytest.raises(CorruptArtifactError, match=f"{saved}: cannot load its BERT weights"):
        SpanReader.from_pretrained(str(saved), max_span_length=3)
    with pytest.raises(CorruptArtifactError, match=f"{encoder}: cannot load its BERT weights"):
        RetrieverEncoder.from_pretrained(str(encoder))


def test_a_damaged_span_head_is_a_corrupt_artifact_error(tiny_bert: str, tmp_path: Path) -> None:
    from realm_core.errors import CorruptArtifactError

    saved = tmp_path / "reader"
    SpanReader.from_pretrained(tiny_bert, max_span_length=3).save_pretrained(saved)
    (saved / SpanReader.HEAD_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(CorruptArtifactError, match="span_head.safetensors: cannot load its span head"):
        SpanReader.from_pretrained(str(saved), max_span_length=3)
