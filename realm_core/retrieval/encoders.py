"""Retriever encoders (REALM §3.1): Embed(x) = W · BERT_CLS(x), a BERT pooled at [CLS] (or the
mean of its tokens) and projected to D = 128 dimensions. The query encoder and the document
(knowledge) encoder have separate weights; both are this class.

`projection_dim=0` keeps the hidden size (no head) and `normalize` L2-normalises the output:
that is how sentence-transformers uses all-MiniLM-L6-v2 (mean pooling, normalised), the
off-the-shelf reference of the retrieval evaluation.

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

from realm_core.bert import load_tokenizer, weights_dir
from realm_core.errors import ConfigError

HEAD_FILE = "realm_retriever.json"
PROJECTION_FILE = "projection.safetensors"
Pooling = Literal["cls", "mean"]


class RetrieverEncoder(nn.Module):
    def __init__(self, bert: Any, projection_dim: int, pooling: Pooling, normalize: bool = False) -> None:
        super().__init__()
        self.bert = bert
        self.pooling = pooling
        self.normalize = normalize
        hidden = int(bert.config.hidden_size)
        self.projection: nn.Module = (nn.Linear(hidden, projection_dim) if projection_dim > 0
                                      else nn.Identity())
        self.dim = projection_dim if projection_dim > 0 else hidden
        self.step = 0  # retriever training steps behind these weights (the index version)

    @property
    def projection_dim(self) -> int:
        return self.dim

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            pooled = hidden[:, 0]  # (B, H)
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, H)
        projected: torch.Tensor = self.projection(pooled)  # (B, D)
        if self.normalize:
            projected = nn.functional.normalize(projected, dim=-1)
        return projected

    @classmethod
    def from_pretrained(cls, source: str, projection_dim: int = 128, pooling: Pooling = "cls",
                        seed: int = 0, normalize: bool = False,
                        dropout: float | None = None) -> RetrieverEncoder:
        """A saved retriever directory, or a plain BERT (bundled name or HF dir) with a fresh
        head (normal, std H^-1/2; seeded). `dropout`
        overrides the BERT's hidden and attention dropout (None: keep its config)."""
        from safetensors.torch import load_file

        from realm_core.bert import load_bert_body, load_weights

        directory = weights_dir(source)
        bert = load_bert_body(source, dropout)
        head = directory / HEAD_FILE
        if head.is_file():
            meta = load_weights(lambda: json.loads(head.read_text()), head, "its retriever head's settings")
            model = cls(bert, int(meta["projection_dim"]), meta["pooling"], bool(meta.get("normalize")))
            model.step = int(meta.get("step", 0))
            if isinstance(model.projection, nn.Linear):
                projection, file = model.projection, directory / PROJECTION_FILE
                load_weights(lambda: projection.load_state_dict(load_file(str(file))), file, "its retriever head")
            return model
        return cls.from_bert(bert, projection_dim, pooling, seed, normalize)

    @classmethod
    def from_bert(cls, bert: Any, projection_dim: int = 128, pooling: Pooling = "cls", seed: int = 0,
                  normalize: bool = False) -> RetrieverEncoder:
        """A BERT body (shared, not copied) with a fresh head: normal, std H^-1/2, seeded."""
        if pooling not in ("cls", "mean"):
            raise ConfigError(f"pooling {pooling!r}: expected 'cls' or 'mean'")
        model = cls(bert, projection_dim, pooling, normalize)
        hidden_size = int(bert.config.hidden_size)
        if isinstance(model.projection, nn.Linear):
            generator = torch.Generator().manual_seed(seed)
            # std H^-1/2 keeps the pooled vector's norm (a Johnson-Lindenstrauss projection), so
            # in-batch softmax scores start O(1) and the head learns from step 1; BERT's 0.02
            # gives the same ranking but near-uniform scores that take many steps to grow.
            with torch.no_grad():
                model.projection.weight.normal_(0.0, hidden_size ** -0.5, generator=generator)
                model.projection.bias.zero_()
        return model

    def save_pretrained(self, directory: Path, tokenizer_source: str | None = None) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.bert.save_pretrained(str(directory), safe_serialization=True)
        if tokenizer_source is not None:
            load_tokenizer(tokenizer_source).save_pretrained(str(directory))
        linear = isinstance(self.projection, nn.Linear)
        if linear:
            state = {k: v.detach().contiguous() for k, v in self.projection.state_dict().items()}
            save_file(state, str(directory / PROJECTION_FILE))
        (directory / HEAD_FILE).write_text(json.dumps(
            {"projection_dim": self.dim if linear else 0, "pooling": self.pooling,
             "normalize": self.normalize, "hidden_size": int(self.bert.config.hidden_size),
             "step": self.step}, indent=2))
