"""The open-QA span reader (REALM §3.3, as in ORQA).

For a question x and a retrieved block z the reader reads `[CLS] x [SEP] z_title [SEP] z_body
[SEP]`; a candidate answer is a span s of the block of at most `max_span_length` wordpieces,
scored from its start and end hidden states:

    S(s) = w · LayerNorm(ReLU(W_s h_start(s) + W_e h_end(s) + b))    (ORQA's span head)

and the answer's probability marginalises over every matching span in every retrieved block,
in one of two forms:

    per_block (REALM §3.3):  p(y|x) = Σ_z p(z|x) Σ_{s in z matching y} softmax_{spans of z}(S)(s)
    joint (ORQA):            p(y|x) = Σ_{(z,s) matching y} softmax_{all (z,s)}(S(s) + log p(z|x))(z,s)

In the per-block form each block's spans sum to one, so a block without the answer still offers
a confident span and the choice between blocks rests on p(z|x) alone; the joint form compares
span scores across blocks (the reader learns "no answer here") with the retrieval score added.

Shapes: B questions, K blocks, T tokens, H hidden, L max span length, S = T * L candidate spans
(start t, length l+1), most of them masked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

_MASKED = -1e9  # exp() of it is 0 in float32; its gradient is finite


class SpanScorer(nn.Module):
    """S(s) = MLP([h_start; h_end]) over every (start, length <= L) span of every block.

    The first layer is linear in the concatenation, W [h_s; h_e] = W_s h_s + W_e h_e, so it runs
    once per token (2 T H^2) rather than once per span (T L 2 H^2); a span then costs an add,
    a ReLU and a dot product."""

    def __init__(self, hidden: int, max_span_length: int) -> None:
        super().__init__()
        self.max_span_length = max_span_length
        self.mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.LayerNorm(hidden),
                                 nn.Linear(hidden, 1))
        for layer in (self.mlp[0], self.mlp[3]):  # ORQA/BERT: N(0, 0.02) weights, zero bias
            assert isinstance(layer, nn.Linear)
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor, block_token_mask: torch.Tensor) -> torch.Tensor:
        """hidden (B, K, T, H), block_token_mask (B, K, T) True on block-body tokens ->
        span scores (B, K, T, L), -inf where a span leaves the block body."""
        t, h = hidden.shape[2], hidden.shape[3]
        first = self.mlp[0]
        assert isinstance(first, nn.Linear)
        as_start = hidden @ first.weight[:, :h].T + first.bias  # (B, K, T, H)
        as_end = hidden @ first.weight[:, h:].T  # (B, K, T, H)
        # Training keeps no (B, K, T, H) activation per span length: each length's scores are
        # recomputed from as_start and as_end in the backward, for a head that costs a small share
        # of the encoder's time (what it lowers: docs/experiments/demo-timings.md)
        recompute = self.training and torch.is_grad_enabled()
        scores = []
        inside = block_token_mask
        for length in range(self.max_span_length):
            ends = (torch.arange(t) + length).clamp(max=t - 1)  # (T,)
            if recompute:
                score = checkpoint(self._length_scores, as_start, as_end, ends, use_reentrant=False)  # (B, K, T)
            else:
                score = self._length_scores(as_start, as_end, ends)  # (B, K, T)
            # every token from start to end is a body token, and the end is inside the row
            inside = inside & block_token_mask[:, :, ends] & (torch.arange(t) + length < t)
            scores.append(score.masked_fill(~inside, float("-inf")))
        return torch.stack(scores, dim=-1)  # (B, K, T, L)

    def _length_scores(self, as_start: torch.Tensor, as_end: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """(B, K, T) scores of the spans from each token to `ends` (T,), before masking."""
        norm, last = self.mlp[2], self.mlp[3]
        return last(norm(torch.relu(as_start + as_end[:, :, ends]))).squeeze(-1)  # type: ignore[no-any-return]


def read_by_length(reader: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   block_token_mask: torch.Tensor, token_type_ids: torch.Tensor, row_tokens: int,
                   device: torch.device | None = None) -> torch.Tensor:
    """Span scores (B, K, T, L) as `reader(...)` gives them for (B, K, T) rows, the B * K rows
    read longest first in chunks of at most `row_tokens` padded wordpieces, each chunk padded
    only to its own longest row: a short block (the end of an article) no longer pads to the
    longest row of its batch, nor makes the span scorer score padding. Rows are independent
    under the attention mask, so the scores are the unsorted forward's up to float rounding."""
    b, k, t = input_ids.shape
    flat = [x.reshape(b * k, t) for x in (input_ids, attention_mask, block_token_mask, token_type_ids)]
    lengths = flat[1].sum(-1)
    order = torch.argsort(lengths, descending=True, stable=True)
    out: torch.Tensor | None = None
    start = 0
    while start < b * k:
        longest = max(int(lengths[order[start]]), 1)
        rows = order[start:start + max(row_tokens // longest, 1)]
        chunk = [x[rows, :longest][None].to(device) if device is not None else x[rows, :longest][None]
                 for x in flat]
        scores = reader(*chunk).float()[0].cpu()  # (n, longest, L)
        if out is None:
            out = torch.full((b * k, t, scores.shape[-1]), float("-inf"))
        out[rows, :longest] = scores
        start += len(rows)
    assert out is not None, "read_by_length needs at least one row"
    return out.view(b, k, t, -1)


def span_log_probs(span_scores: torch.Tensor, log_p_z: torch.Tensor, form: str) -> torch.Tensor:
    """log p(z, s | x) of every span of every block, (B, K, S) flattened spans; -inf-like
    (`_MASKED`) where a span leaves the block body. `form` is per_block or joint (module doc)."""
    b, k = log_p_z.shape
    # Masked entries are a large finite negative, not -inf: a logsumexp over nothing but -inf
    # has a NaN gradient, which would reach the shared weights through the blocks (and the
    # questions) that hold no gold span.
    flat = span_scores.reshape(b, k, -1)  # (B, K, S)
    flat = flat.masked_fill(~torch.isfinite(flat), _MASKED)
    if form == "per_block":
        return torch.log_softmax(flat, dim=-1) + log_p_z[:, :, None]  # within each block, then p(z|x)
    if form == "joint":
        joint = (flat + log_p_z[:, :, None]).reshape(b, -1)  # (B, K*S) one softmax over all pairs
        return torch.log_softmax(joint, dim=-1).reshape(b, k, -1)
    raise ValueError(f"marginal form {form!r}: expected per_block or joint")


def span_marginal_likelihood(span_scores: torch.Tensor, gold: torch.Tensor, log_p_z: torch.Tensor,
                             form: str = "per_block") -> torch.Tensor:
    """log p(y|x) = logsumexp over the gold (block, span) pairs of log p(z, s|x).

    span_scores (B, K, T, L); gold (B, K, T, L) True for spans whose text matches an answer;
    log_p_z (B, K). Returns (B,); -inf where no retrieved block holds a gold span."""
    b = log_p_z.shape[0]
    log_p = span_log_probs(span_scores, log_p_z, form)  # (B, K, S)
    on_gold = log_p.masked_fill(~gold.reshape(log_p.shape), _MASKED)
    log_p_y = torch.logsumexp(on_gold.reshape(b, -1), dim=-1)  # (B,)
    return torch.where(gold.flatten(1).any(-1), log_p_y, torch.full_like(log_p_y, float("-inf")))


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


class SpanReader(nn.Module):
    """The fine-tuned reader: a BERT body (the bundled encoder, or REALM's pretrained
    knowledge-augmented encoder) and the span scorer on its last hidden states."""

    HEAD_FILE = "span_head.safetensors"
    META_FILE = "realm_span_reader.json"

    def __init__(self, bert: Any, max_span_length: int) -> None:
        super().__init__()
        self.bert = bert
        self.scorer = SpanScorer(int(bert.config.hidden_size), max_span_length)

    @classmethod
    def from_pretrained(cls, source: str, max_span_length: int, dropout: float | None = None,
                        seed: int = 0) -> SpanReader:
        """A saved span reader, or any BERT directory (a BertForMaskedLM's body is taken) with
        a fresh span head (seeded)."""
        from safetensors.torch import load_file

        from realm_core.bert import load_bert_body, load_weights, weights_dir

        directory = weights_dir(source)
        bert = load_bert_body(source, dropout)
        meta = directory / cls.META_FILE
        if meta.is_file():
            settings = load_weights(lambda: json.loads(meta.read_text()), meta, "its span head's settings")
            model = cls(bert, int(settings["max_span_length"]))
            head = directory / cls.HEAD_FILE
            load_weights(lambda: model.scorer.load_state_dict(load_file(str(head))), head, "its span head")
            return model
        torch.manual_seed(seed)
        return cls(bert, max_span_length)

    def save_pretrained(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.bert.save_pretrained(str(directory), safe_serialization=True)
        save_file({k: v.detach().contiguous() for k, v in self.scorer.state_dict().items()},
                  str(directory / self.HEAD_FILE))
        (directory / self.META_FILE).write_text(json.dumps(
            {"max_span_length": self.scorer.max_span_length}, indent=2))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                block_token_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, K, T) rows -> span scores (B, K, T, L). `token_type_ids` mark the block (BERT's
        segment B) after the question."""
        b, k, t = input_ids.shape
        types = token_type_ids.reshape(b * k, t) if token_type_ids is not None else None
        hidden = self.bert(input_ids=input_ids.view(b * k, t), attention_mask=attention_mask.view(b * k, t),
                           token_type_ids=types).last_hidden_state  # (BK, T, H)
        # the span scorer in fp32 under bf16 autocast: its (T x L) scores are compared and
        # normalised across every span of K blocks, finer than bf16's 8-bit mantissa resolves
        with torch.autocast(hidden.device.type, enabled=False):
            scores: torch.Tensor = self.scorer(hidden.view(b, k, t, -1).float(), block_token_mask)
        return scores
