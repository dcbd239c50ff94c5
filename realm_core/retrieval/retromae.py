"""RetroMAE (Xiao et al. 2022): a masked auto-encoder that pretrains a retrieval encoder, this
project's alternative to the Inverse Cloze Task for warm-starting REALM's retriever.

    encoder  BERT over the block masked at a moderate rate (30%); MLM loss at the masked
             positions; the sentence embedding h is the final [CLS] hidden state.
    decoder  one transformer layer that must rebuild the block from h and an aggressively
             masked view of it (50%), so h has to carry the block's content.

Enhanced decoding (RetroMAE §3.3) uses two streams and a per-row attention mask:

    query stream    q_i = h + p_i                     (no token: what position i must predict)
    content stream  c_0 = h,  c_j = e(x_j) + p_j      (the unmasked tokens)
    attention       row i sees c_0 (always) and each c_j, j != i, with probability
                    1 - decoder_mask_rate, never c_i itself

and the reconstruction loss covers every position. Plain decoding (the ablation) masks the
decoder's input tokens at `decoder_mask_rate`, replaces position 0 by h, runs ordinary
self-attention and scores the masked positions only. Loss = encoder MLM + decoder loss.

The MLM head (transform + output tied to the word embeddings) is shared by both losses, and
like the REALM reader's it runs only at the positions that are scored.

Shapes: B batch, T tokens, H hidden, V vocabulary, M scored positions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from realm_core.config import RetroMAEConfig
from realm_core.progress import NoProgress, Progress

if TYPE_CHECKING:
    from realm_core.distributed import Placement


def encoder_mask(input_ids: torch.Tensor, special: torch.Tensor, rate: float, tokenizer: Any,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking at `rate` of the non-special tokens (80% [MASK], 10% random, 10% kept).

    Returns the (B, T) masked ids and the (B, T) bool mask of positions to predict. The draws come
    from the CPU `generator` whatever the ids' device, so a step masks alike on every device."""
    shape, device = input_ids.shape, input_ids.device
    chosen = (torch.rand(shape, generator=generator) < rate).to(device) & ~special  # (B, T)
    action = torch.rand(shape, generator=generator).to(device)                     # (B, T)
    masked = input_ids.clone()
    masked[chosen & (action < 0.8)] = tokenizer.mask_token_id
    randomise = chosen & (action >= 0.8) & (action < 0.9)
    masked[randomise] = torch.randint(len(tokenizer), shape, generator=generator).to(device)[randomise]
    return masked, chosen


def enhanced_attention_mask(valid: torch.Tensor, rate: float, generator: torch.Generator) -> torch.Tensor:
    """(B, T, T) bool, True where query row i may attend to content column j.

    Column 0 (the sentence embedding) is always visible; another valid column j != i is visible
    with probability 1 - rate, sampled per (row, column); a row never sees itself. Drawn from the
    CPU `generator`, on `valid`'s device."""
    b, t = valid.shape
    visible = (torch.rand((b, t, t), generator=generator) >= rate).to(valid.device)  # (B, T, T)
    visible &= valid[:, None, :]
    visible &= ~torch.eye(t, dtype=torch.bool, device=valid.device)[None]
    visible[:, :, 0] = True
    return visible


class DecoderLayer(nn.Module):
    """One transformer layer whose queries and keys/values may come from different streams."""

    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn = nn.Sequential(nn.Linear(hidden, intermediate), nn.GELU(), nn.Linear(intermediate, hidden))
        self.norm2 = nn.LayerNorm(hidden, eps=eps)
        for module in self.modules():  # BERT's initialisation
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def forward(self, query: torch.Tensor, content: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """query, content: (B, T, H); allowed: (B, T, T) bool -> (B, T, H)."""
        b, t, h = query.shape

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, t, self.heads, h // self.heads).transpose(1, 2)  # (B, heads, T, H/heads)

        attended = nn.functional.scaled_dot_product_attention(
            split(self.query(query)), split(self.key(content)), split(self.value(content)),
            attn_mask=allowed[:, None])  # (B, heads, T, H/heads)
        x = self.norm1(query + self.out(attended.transpose(1, 2).reshape(b, t, h)))
        return self.norm2(x + self.ffn(x))  # type: ignore[no-any-return]


class RetroMAE(nn.Module):
    def __init__(self, masked_lm: Any) -> None:
        super().__init__()
        self.masked_lm = masked_lm  # BertForMaskedLM: the encoder and the shared MLM head
        cfg = masked_lm.config
        self.decoder = DecoderLayer(cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
                                    cfg.layer_norm_eps)

    @classmethod
    def from_pretrained(cls, source: str, dropout: float | None = None) -> RetroMAE:
        from realm_core.bert import load_masked_lm

        return cls(load_masked_lm(source, dropout))

    def _scored_log_probs(self, hidden: torch.Tensor, where: torch.Tensor, targets: torch.Tensor,
                          chunk: int = 2048) -> torch.Tensor:
        """Mean -log p(target) over the (B, T) bool positions `where`, the head run only there.

        The (M, V) logits are made `chunk` rows at a time and remade in the backward pass
        (checkpointing), so memory holds chunk x V floats rather than M x V."""
        from torch.utils.checkpoint import checkpoint

        scored, wanted = hidden[where], targets[where]  # (M, H), (M,)

        def summed(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(self.masked_lm.cls(h).float(), t, reduction="sum")

        total = sum(checkpoint(summed, scored[i:i + chunk], wanted[i:i + chunk], use_reentrant=False)
                    for i in range(0, len(wanted), chunk))
        return total / max(len(wanted), 1)  # type: ignore[no-any-return]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, special: torch.Tensor,
                tokenizer: Any, config: RetroMAEConfig, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """Losses for a (B, T) batch of blocks: encoder MLM, decoder reconstruction, their sum."""
        valid = attention_mask.bool()  # (B, T)
        enc_ids, enc_scored = encoder_mask(input_ids, special, config.encoder_mask_rate, tokenizer, generator)
        hidden = self.masked_lm.bert(input_ids=enc_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        encoder_loss = self._scored_log_probs(hidden, enc_scored, input_ids)
        h = hidden[:, :1]  # (B, 1, H): the sentence embedding, final [CLS] state
        embeddings = self.masked_lm.bert.embeddings
        if config.enhanced_decoding:
            positions = embeddings.position_embeddings(
                torch.arange(input_ids.size(1), device=input_ids.device))[None]  # (1, T, H)
            query = h + positions                                                        # (B, T, H)
            content = torch.cat([h, embeddings(input_ids=input_ids)[:, 1:]], dim=1)       # (B, T, H)
            allowed = enhanced_attention_mask(valid, config.decoder_mask_rate, generator)  # (B, T, T)
            decoded = self.decoder(query, content, allowed)
            dec_scored = valid.clone()
            dec_scored[:, 0] = False  # every position but the embedding's own
        else:
            dec_ids, dec_scored = encoder_mask(input_ids, special, config.decoder_mask_rate, tokenizer, generator)
            stream = torch.cat([h, embeddings(input_ids=dec_ids)[:, 1:]], dim=1)  # (B, T, H)
            decoded = self.decoder(stream, stream, valid[:, None, :].expand(-1, valid.size(1), -1))
        decoder_loss = self._scored_log_probs(decoded, dec_scored, input_ids)
        return {"loss": encoder_loss + decoder_loss, "encoder_loss": encoder_loss, "decoder_loss": decoder_loss}


def retromae_batch(texts: list[str], titles: list[str], tokenizer: Any, max_length: int) -> dict[str, torch.Tensor]:
    """`[CLS] title [SEP] body [SEP]` padded to the longest, with its special-tokens mask."""
    enc = tokenizer(titles, texts, truncation="only_second", max_length=max_length, padding=True,
                    return_special_tokens_mask=True, return_tensors="pt")
    special = enc["special_tokens_mask"].bool() | ~enc["attention_mask"].bool()
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "special": special}


@dataclass
class RetroMAEPoint:
    step: int
    loss: float
    encoder_loss: float
    decoder_loss: float
    learning_rate: float
    seconds: float


def train_retromae(model: RetroMAE, titles: list[str], texts: list[str], tokenizer: Any,
                   config: RetroMAEConfig, checkpoint_root: Path, progress: Progress | None = None,
                   on_log: Callable[[RetroMAEPoint], None] | None = None,
                   placement: Placement | None = None) -> list[RetroMAEPoint]:
    """Train in place for `config.steps` steps over the blocks, resuming from the newest
    checkpoint; batches, masks and attention samples are functions of (seed, step). The model is
    on `placement`'s device (default: the CPU, fp32); its precision is the forward's autocast."""
    from realm_core.distributed import Placement
    from realm_core.training import (
        adamw,
        latest_checkpoint,
        learning_rate_at,
        record_step,
        restore_checkpoint,
        set_learning_rate,
        step_seed,
    )

    progress = progress or NoProgress()
    placement = placement or Placement.single()
    modules = {"masked_lm": model.masked_lm, "decoder": model.decoder}
    optimizer = adamw([model.masked_lm, model.decoder], config.learning_rate, config.weight_decay)
    curve: list[RetroMAEPoint] = []
    start = 0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, modules, optimizer)
        start = ckpt.step
        curve = [RetroMAEPoint(**p) for p in ckpt.state["curve"]]
    progress.start("RetroMAE", config.steps, "steps")
    progress.advance(start)
    model.train()
    began = time.perf_counter()
    for step in range(start, config.steps):
        # data: blocks drawn as a function of (seed, step)
        rng = np.random.default_rng(step_seed(config.seed, step))
        picks = rng.choice(len(texts), size=min(config.batch_size, len(texts)), replace=False)
        batch = retromae_batch([texts[i] for i in picks], [titles[i] for i in picks], tokenizer,
                               config.block_length)
        batch = {k: v.to(placement.device) for k, v in batch.items()}
        lr = learning_rate_at(step, config.learning_rate, config.warmup_steps, config.steps)
        set_learning_rate(optimizer, lr)
        # forward (masks, encoder, decoder), backward, clip, step
        torch.manual_seed(step_seed(config.seed, step, stream=1))  # dropout masks
        generator = torch.Generator().manual_seed(step_seed(config.seed, step, stream=2))
        with placement.compute():
            losses = model(batch["input_ids"], batch["attention_mask"], batch["special"], tokenizer, config,
                           generator)
        if not math.isfinite(losses["loss"].item()):
            raise FloatingPointError(f"step {step + 1}: RetroMAE loss is {losses['loss'].item()}; "
                                     "lower retromae.learning_rate")
        optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                       config.max_grad_norm)
        optimizer.step()
        # log, checkpoint
        point = RetroMAEPoint(step + 1, losses["loss"].item(), losses["encoder_loss"].item(),
                              losses["decoder_loss"].item(), lr, time.perf_counter() - began)
        record_step(point, curve, config, progress, on_log, checkpoint_root, modules, optimizer)
    progress.finish()
    return curve
