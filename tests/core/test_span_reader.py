import math

import pytest
import torch

from realm_core.openqa.span_reader import SpanScorer, gold_spans, span_marginal_likelihood


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
