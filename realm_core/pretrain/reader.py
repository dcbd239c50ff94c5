"""The knowledge-augmented encoder (REALM §3.2) and the marginal likelihood over retrieved blocks.

For each masked query x and retrieved block z the reader reads
`[CLS] x [SEP] z_title [SEP] z_body [SEP]` (the null block: `[CLS] x [SEP]`) and predicts the
masked wordpieces of x:

    p(y|x)  = sum_z p(y|x,z) p(z|x)                  REALM eq. (1)
    p(y|x,z) = prod_j p(y_j|x,z)                     over the masked positions j
    p(z|x)  = softmax_z(Embed_input(x) . Embed_doc(z))

computed in log space with logsumexp. With `pretrain.null_weight` w, p(null|x) = w and the
retrieved blocks share 1 - w by the softmax over their own scores. The MLM head runs only at
masked positions (a 32 x 256 reader step costs 2.5 s instead of 7.6 s with HF's head over every
position on 2 cores).

The reader is a BERT with an MLM head initialised from the bundled encoder: the BERT body is the
encoder's, the output embedding is tied to its word embeddings, the head's transform (dense +
LayerNorm) starts as BERT initialises layers (all-MiniLM-L6-v2 ships no MLM head) and its
output bias at zero.

Shapes: B batch, K blocks per example (null included), T tokens, M masked positions, H hidden,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from realm_core.bert import load_masked_lm


class KnowledgeAugmentedEncoder(nn.Module):
    def __init__(self, masked_lm: Any) -> None:
        super().__init__()
        self.masked_lm = masked_lm

    @classmethod
    def from_pretrained(cls, source: str, dropout: float | None = None, seed: int = 0) -> KnowledgeAugmentedEncoder:
        """`source`'s BERT with an MLM head; a head the checkpoint lacks starts from `seed`."""
        return cls(load_masked_lm(source, dropout, seed))

    def save_pretrained(self, directory: Any) -> None:
        self.masked_lm.save_pretrained(str(directory), safe_serialization=True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over the vocabulary at the masked positions.

        input_ids, attention_mask: (B, K, T); masked_positions: (B, M) -> (B, K, M, V)."""
        b, k, t = input_ids.shape
        hidden = self.masked_lm.bert(input_ids=input_ids.view(b * k, t),
                                     attention_mask=attention_mask.view(b * k, t)).last_hidden_state  # (BK, T, H)
        positions = masked_positions.repeat_interleave(k, dim=0)  # (BK, M): x comes first in every row
        at_masks = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.size(-1)))  # (BK, M, H)
        logits = self.masked_lm.cls(at_masks)  # (BK, M, V)
        return torch.log_softmax(logits.float(), dim=-1).view(b, k, positions.size(1), -1)


@dataclass
class MarginalOutput:
    loss: torch.Tensor              # () mean over the batch of -log p(y|x)
    log_p_y: torch.Tensor           # (B,)   log p(y|x)
    log_p_y_given_z: torch.Tensor   # (B, K) log p(y|x,z)
    log_p_z: torch.Tensor           # (B, K) log p(z|x)
    token_log_probs: torch.Tensor   # (B, K, M, V)


def retrieval_log_prior(scores: torch.Tensor, block_mask: torch.Tensor, null_weight: float | None = None) -> torch.Tensor:
    """(B, K) log p(z|x), the null block in slot 0. REALM's: a softmax over every block's score,
    the null block's included. With `null_weight` w the null block has the fixed share w and the
    retrieved blocks share 1 - w by a softmax over their own scores, so the scores' gradient only
    ranks the retrieved blocks against each other; an example with no retrieved block reads the
    null block alone."""
    masked = scores.float().masked_fill(~block_mask, float("-inf"))  # (B, K)
    if null_weight is None:
        return torch.log_softmax(masked, dim=-1)
    has = block_mask[:, 1:].any(-1)  # (B,)
    # rows without a retrieved block get finite dummies, so that no NaN reaches the gradient
    retrieved = masked[:, 1:].masked_fill(~has[:, None], 0.0)  # (B, K-1)
    log_retrieved = (torch.log_softmax(retrieved, dim=-1) + math.log1p(-null_weight)).masked_fill(
        ~block_mask[:, 1:], float("-inf"))  # (B, K-1)
    null = torch.where(has, math.log(null_weight), 0.0).to(masked.dtype)  # (B,)
    return torch.cat([null[:, None], log_retrieved], dim=1)


def marginal_likelihood(token_log_probs: torch.Tensor, targets: torch.Tensor, target_mask: torch.Tensor,
                        scores: torch.Tensor, block_mask: torch.Tensor, null_weight: float | None = None) -> MarginalOutput:
    """REALM eq. (1) in log space.

    token_log_probs: (B, K, M, V) from the reader; targets, target_mask: (B, M);
    scores: (B, K) relevance Embed_input(x) . Embed_doc(z); block_mask: (B, K) False where a slot
    holds no block (fewer candidates than K after excluding trivial retrievals); `null_weight`:
    the null block's fixed share of p(z|x) (`retrieval_log_prior`; None: scored as the others)."""
    k = token_log_probs.size(1)
    gold = token_log_probs.gather(-1, targets.unsqueeze(1).expand(-1, k, -1).unsqueeze(-1)).squeeze(-1)  # (B, K, M)
    gold = gold * target_mask.unsqueeze(1).to(gold.dtype)
    log_p_y_given_z = gold.sum(-1)  # (B, K)
    log_p_z = retrieval_log_prior(scores, block_mask, null_weight)  # (B, K)
    joint = (log_p_z + log_p_y_given_z).masked_fill(~block_mask, float("-inf"))  # (B, K)
    log_p_y = torch.logsumexp(joint, dim=-1)  # (B,)
    return MarginalOutput(-log_p_y.mean(), log_p_y, log_p_y_given_z, log_p_z, token_log_probs)


def span_predictions(out: MarginalOutput, block_mask: torch.Tensor) -> torch.Tensor:
    """(B, M) argmax of the marginal p(y_j|x) = sum_z p(z|x) p(y_j|x,z) at each masked position."""
    weights = out.log_p_z.masked_fill(~block_mask, float("-inf"))  # (B, K)
    marginal = torch.logsumexp(weights[:, :, None, None] + out.token_log_probs, dim=1)  # (B, M, V)
    return marginal.argmax(-1)
