"""Retriever encoders (REALM §3.1): Embed(x) = W · BERT_CLS(x), a BERT pooled at [CLS] (or the
mean of its tokens) and projected to D = 128 dimensions. The query encoder and the document
(knowledge) encoder have separate weights; both are this class.

Saved as a Hugging Face `save_pretrained` directory (safetensors), so `transformers.AutoModel`
loads the BERT, plus `projection.safetensors` and `realm_retriever.json` for the head.

Shapes: B batch, T tokens, H hidden size, D embedding dim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from realm_core.encoders import load_tokenizer, resolve_encoder_dir
from realm_core.errors import ArtifactError, ConfigError

HEAD_FILE = "realm_retriever.json"
PROJECTION_FILE = "projection.safetensors"
Pooling = Literal["cls", "mean"]


class RetrieverEncoder(nn.Module):
    def __init__(self, bert: Any, projection_dim: int, pooling: Pooling) -> None:
        super().__init__()
        self.bert = bert
        self.pooling = pooling
        self.projection = nn.Linear(bert.config.hidden_size, projection_dim)

    @property
    def projection_dim(self) -> int:
        return int(self.projection.out_features)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            pooled = hidden[:, 0]  # (B, H)
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, H)
        projected: torch.Tensor = self.projection(pooled)  # (B, D)
        return projected

    @classmethod
    def from_pretrained(cls, source: str, projection_dim: int = 128, pooling: Pooling = "cls",
                        seed: int = 0) -> RetrieverEncoder:
        """A saved retriever directory, or a plain BERT (bundled name or HF dir) with a fresh
        head initialised as BERT initialises its layers (normal, std 0.02; seeded)."""
        from safetensors.torch import load_file
        from transformers import AutoModel

        directory = resolve_encoder_dir(source)
        bert = AutoModel.from_pretrained(str(directory), add_pooling_layer=False)
        head = directory / HEAD_FILE
        if head.is_file():
            meta = json.loads(head.read_text())
            model = cls(bert, int(meta["projection_dim"]), meta["pooling"])
            try:
                state = load_file(str(directory / PROJECTION_FILE))
                model.projection.load_state_dict(state)
            except (OSError, RuntimeError) as e:
                raise ArtifactError(f"{directory / PROJECTION_FILE}: unreadable retriever head ({e})") from None
            return model
        if pooling not in ("cls", "mean"):
            raise ConfigError(f"pooling {pooling!r}: expected 'cls' or 'mean'")
        model = cls(bert, projection_dim, pooling)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            model.projection.weight.normal_(0.0, 0.02, generator=generator)
            model.projection.bias.zero_()
        return model

    def save_pretrained(self, directory: Path, tokenizer_source: str | None = None) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.bert.save_pretrained(str(directory), safe_serialization=True)
        if tokenizer_source is not None:
            load_tokenizer(tokenizer_source).save_pretrained(str(directory))
        state = {k: v.detach().contiguous() for k, v in self.projection.state_dict().items()}
        save_file(state, str(directory / PROJECTION_FILE))
        (directory / HEAD_FILE).write_text(json.dumps(
            {"projection_dim": self.projection_dim, "pooling": self.pooling,
             "hidden_size": int(self.bert.config.hidden_size)}, indent=2))
