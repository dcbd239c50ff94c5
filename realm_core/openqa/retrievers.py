"""The open-QA retrievers behind one protocol: `propose` the top-k blocks of each question with the
retriever's own scores, and `logits` for those blocks (differentiable where the retriever
trains). The reader adds logits / temperature to its span scores (ORQA's joint form) or uses
their softmax as p(z|x) (REALM §3.3's per-block form).

| name  | proposes                                   | logits                          |
|-------|--------------------------------------------|---------------------------------|
| gold  | each question's own gold passage (K=1)     | 0                               |
| bm25  | bm25s over title + body                    | BM25 scores (fixed)             |
| dense | query encoder vs frozen block embeddings   | inner product (query encoder trains) |
| none  | nothing                                    | -                               |

A new retriever is one class here (its `build` loads what it needs) and one line in `RETRIEVERS`;
fine-tuning and evaluation only call `build`, `propose` and `logits`, and read the class's
`retrieves` and `needs_query_encoder` flags.
Shapes: B questions, K blocks, D embedding dim, N corpus blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from realm_core.openqa.reading import BlockStore, QAQuestion
from realm_core.retrieval.embed import pad_sequences


@dataclass
class Sources:
    """What a retriever may build itself from: the artifact store, the blocks artifact, the
    frozen document embeddings' config (dense), the query encoder and its tokenizer."""

    store: Any = None
    blocks_ref: Any = None
    doc_embed: Any = None      # EmbedConfig of the frozen block embeddings
    query_encoder: Any = None  # RetrieverEncoder
    tokenizer: Any = None
    question_length: int = 32


@dataclass
class Proposal:
    ids: np.ndarray     # (B, K) block ids
    scores: np.ndarray  # (B, K) the retriever's scores for them (float32)


class Retriever:
    """Base: proposes nothing; subclasses say what they retrieve."""

    name: ClassVar[str] = "none"
    trainable: ClassVar[bool] = False
    retrieves: ClassVar[bool] = False      # proposes blocks at all
    needs_query_encoder: ClassVar[bool] = False  # a (trainable) query encoder

    def __init__(self, blocks: BlockStore, top_k: int) -> None:
        self.blocks, self.top_k = blocks, top_k

    @classmethod
    def build(cls, blocks: BlockStore, top_k: int, sources: Sources) -> Retriever:
        """The retriever over `blocks`, loading what it needs from `sources`."""
        return cls(blocks, top_k)

    def propose(self, questions: list[QAQuestion]) -> Proposal:
        """(B, K) blocks per question, no gradient."""
        empty = np.zeros((len(questions), 0))
        return Proposal(empty.astype(np.int64), empty.astype(np.float32))

    def logits(self, questions: list[QAQuestion], proposal: Proposal) -> torch.Tensor:
        """(B, K) retrieval logits of the proposed blocks."""
        return torch.from_numpy(proposal.scores.astype(np.float32))


class GoldPassage(Retriever):
    """Each question's own gold passage (SQuAD's paragraph): the reader's ceiling, and the
    first, cheap phase of reader training (DPR's reader trains on gold passages too)."""

    name = "gold"
    retrieves = True

    def propose(self, questions: list[QAQuestion]) -> Proposal:
        missing = [q.qid for q in questions if q.passage is None]
        if missing:
            raise ValueError(f"questions without a gold passage: {missing[:3]}")
        ids = np.asarray([[q.passage] for q in questions], dtype=np.int64)
        return Proposal(ids, np.zeros(ids.shape, dtype=np.float32))


class BM25(Retriever):
    """bm25s over title + body (English stop words, Snowball stemmer); its scores are the logits."""

    name = "bm25"
    retrieves = True

    def __init__(self, blocks: BlockStore, top_k: int) -> None:
        import bm25s
        import Stemmer

        super().__init__(blocks, top_k)
        self._stemmer = Stemmer.Stemmer("english")
        n = blocks.corpus_size
        corpus = bm25s.tokenize([f"{t} {b}" for t, b in zip(blocks.titles[:n], blocks.texts[:n], strict=True)],
                                stopwords="en", stemmer=self._stemmer, show_progress=False)
        self.index = bm25s.BM25()
        self.index.index(corpus, show_progress=False)

    def propose(self, questions: list[QAQuestion]) -> Proposal:
        import bm25s

        tokens = bm25s.tokenize([q.question for q in questions], stopwords="en", stemmer=self._stemmer,
                                return_ids=False, show_progress=False)
        tokens = [t if t else ["[empty]"] for t in tokens]  # a stop-word-only question
        rows, scores = self.index.retrieve(tokens, k=self.top_k, show_progress=False)
        return Proposal(np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32))


def embed_questions(query_encoder: Any, tokenizer: Any, texts: list[str], max_length: int) -> torch.Tensor:
    """(B, D) query embeddings of `texts`, cut to `max_length` wordpieces."""
    enc = tokenizer(texts, truncation=True, max_length=max_length, return_attention_mask=False)["input_ids"]
    ids, mask = pad_sequences(enc, tokenizer.pad_token_id)
    device = next(query_encoder.parameters()).device
    out: torch.Tensor = query_encoder(ids.to(device), mask.to(device)).float()
    return out


class Dense(Retriever):
    """The query encoder against the frozen block embeddings (faiss flat inner product); the
    logits are recomputed with the current query encoder, so it learns without re-embedding."""

    name = "dense"
    trainable = True
    retrieves = True
    needs_query_encoder = True

    def __init__(self, blocks: BlockStore, top_k: int, query_encoder: Any, tokenizer: Any,
                 block_vectors: np.ndarray, question_length: int) -> None:
        from realm_core.retrieval.index import MipsIndex

        super().__init__(blocks, top_k)
        self.query_encoder, self.tokenizer, self.question_length = query_encoder, tokenizer, question_length
        self.index = MipsIndex.build(block_vectors.shape[1], "Flat")
        self.index.add(block_vectors, np.arange(len(block_vectors), dtype=np.int64))
        self.vectors = torch.from_numpy(np.ascontiguousarray(block_vectors, dtype=np.float32))  # (N, D)

    @classmethod
    def build(cls, blocks: BlockStore, top_k: int, sources: Sources) -> Retriever:
        """The block embeddings of `sources.doc_embed` (computed through the cache if missing)."""
        from pathlib import Path

        from realm_core.errors import ConfigError
        from realm_core.retrieval.embed import load_embeddings
        from realm_core.retrieval.stage import run_embed_blocks

        emb = sources.store.open(run_embed_blocks(sources.store, sources.blocks_ref, sources.doc_embed).ref,
                                 kind="embeddings")
        vectors = load_embeddings(Path(emb.path) / "embeddings", emb.manifest["embeddings"], blocks.corpus_size)
        if vectors.shape[1] != sources.query_encoder.projection_dim:
            raise ConfigError(f"{emb.path}: block embeddings of dimension {vectors.shape[1]}, the query "
                              f"encoder gives {sources.query_encoder.projection_dim}")
        return cls(blocks, top_k, sources.query_encoder, sources.tokenizer, vectors, sources.question_length)

    def embed(self, questions: list[QAQuestion]) -> torch.Tensor:
        return embed_questions(self.query_encoder, self.tokenizer, [q.question for q in questions],
                               self.question_length)

    def propose(self, questions: list[QAQuestion]) -> Proposal:
        with torch.no_grad():
            q = self.embed(questions)  # (B, D)
        scores, ids = self.index.search(q.cpu().numpy(), self.top_k)
        return Proposal(np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32))

    def logits(self, questions: list[QAQuestion], proposal: Proposal) -> torch.Tensor:
        q = self.embed(questions)  # (B, D)
        vectors = self.vectors[torch.from_numpy(proposal.ids)].to(q.device)  # (B, K, D)
        return torch.einsum("bd,bkd->bk", q, vectors)  # (B, K)


RETRIEVERS: dict[str, type[Retriever]] = {"none": Retriever, "gold": GoldPassage, "bm25": BM25, "dense": Dense}
