"""The open-QA span reader (REALM §3.3, as in ORQA).

For a question x and a retrieved block z the reader reads `[CLS] x [SEP] z_title [SEP] z_body
[SEP]`; a candidate answer is a span s of the block of at most `max_span_length` wordpieces,
scored from its start and end hidden states:

    S(s) = MLP([h_start(s); h_end(s)])
    p(y|z,x) ∝ Σ_{s in z matching y} exp(S(s))          (softmax over all spans of z)
    p(y|x)   = Σ_z p(y|z,x) p(z|x)

so the loss marginalises over every matching span in every retrieved block.

Shapes: B questions, K blocks, T tokens, H hidden, L max span length, S = T * L candidate spans
(start t, length l+1), most of them masked.
"""

from __future__ import annotations

import torch
from torch import nn


class SpanScorer(nn.Module):
    """S(s) = MLP([h_start; h_end]) over every (start, length <= L) span of every block."""

    def __init__(self, hidden: int, max_span_length: int) -> None:
        super().__init__()
        self.max_span_length = max_span_length
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, hidden: torch.Tensor, block_token_mask: torch.Tensor) -> torch.Tensor:
        """hidden (B, K, T, H), block_token_mask (B, K, T) True on block-body tokens ->
        span scores (B, K, T, L), -inf where a span leaves the block body."""
        b, k, t, h = hidden.shape
        scores = []
        for length in range(self.max_span_length):
            ends = torch.arange(t) + length  # (T,)
            valid_end = ends < t
            ends = ends.clamp(max=t - 1)
            end_hidden = hidden[:, :, ends]  # (B, K, T, H)
            pair = torch.cat([hidden, end_hidden], dim=-1)  # (B, K, T, 2H)
            score = self.mlp(pair).squeeze(-1)  # (B, K, T)
            inside = block_token_mask & block_token_mask[:, :, ends] & valid_end
            # a span must not cross a non-block token: every token between start and end is inside
            for offset in range(1, length):
                inside = inside & block_token_mask[:, :, (torch.arange(t) + offset).clamp(max=t - 1)]
            scores.append(score.masked_fill(~inside, float("-inf")))
        return torch.stack(scores, dim=-1)  # (B, K, T, L)


def span_marginal_likelihood(span_scores: torch.Tensor, gold: torch.Tensor,
                             log_p_z: torch.Tensor) -> torch.Tensor:
    """log p(y|x) = logsumexp over blocks z and gold spans s in z of
    log p(z|x) + log softmax_{spans of z}(S)(s).

    span_scores (B, K, T, L); gold (B, K, T, L) True for spans whose text matches an answer;
    log_p_z (B, K). Returns (B,); -inf where no retrieved block holds a gold span."""
    b, k = log_p_z.shape
    flat = span_scores.reshape(b, k, -1)  # (B, K, S)
    log_p_s = torch.log_softmax(flat, dim=-1)  # within each block
    log_p_s = torch.nan_to_num(log_p_s, nan=float("-inf"))  # blocks with no valid span at all
    on_gold = log_p_s.masked_fill(~gold.reshape(b, k, -1), float("-inf"))
    per_block = torch.logsumexp(on_gold, dim=-1)  # (B, K) log p(y|z,x)
    return torch.logsumexp(per_block + log_p_z, dim=-1)  # (B,)


def gold_spans(row_ids: list[int], block_token_mask: list[bool], answers: list[list[int]],
               max_span_length: int) -> torch.Tensor:
    """(T, L) mask of the spans of one reader row whose wordpieces equal a tokenised answer,
    inside the block body (REALM §3.3: every matching span counts)."""
    t = len(row_ids)
    gold = torch.zeros((t, max_span_length), dtype=torch.bool)
    for answer in answers:
        n = len(answer)
        if n == 0 or n > max_span_length:
            continue
        for start in range(t - n + 1):
            if row_ids[start:start + n] == answer and all(block_token_mask[start:start + n]):
                gold[start, n - 1] = True
    return gold
