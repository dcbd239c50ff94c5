"""Every retriever behind one protocol and one registry: `propose` the top-k blocks of each
question with the retriever's own scores (over the whole corpus, or over given candidate blocks),
and `logits` for those blocks (differentiable where the retriever trains). Retrieval evaluation,
open-QA fine-tuning and evaluation, and the query side all build retrievers through
`RETRIEVERS[name].build(blocks, top_k, sources)` and call nothing else.

| name  | proposes                                             | logits                               |
|-------|------------------------------------------------------|--------------------------------------|
| none  | nothing                                              | -                                    |
| gold  | each question's own gold passage (K=1)               | 0                                    |
| bm25  | bm25s over title + body                              | BM25 scores (fixed)                  |
| dense | a query encoder against frozen block embeddings      | inner product (query encoder trains) |
| index | the index version `index/CURRENT` names, with the query encoder of its document encoder | its scores |

A new retriever is one class here (its `build` loads what it needs from `Sources`) and one line
in `RETRIEVERS`; callers read only the class's flags (`retrieves`, `needs_query_encoder`).

Shapes: B questions, K blocks, D embedding dim, N corpus blocks, C candidate blocks, M the id range
of a knowledge corpus (one past its largest block id).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from realm_core.distributed import module_device
from realm_core.errors import ConfigError, MissingIndexError
from realm_core.retrieval.embed import pad_sequences


class Corpus(Protocol):
    """The blocks a retriever searches: ids 0..corpus_size-1 are the corpus (a BlockStore may
    hold gold passages after them, which are never retrieved)."""

    titles: list[str]
    texts: list[str]

    @property
    def corpus_size(self) -> int: ...


class Query(Protocol):
    question: str
    passage: int | None  # the gold passage's block id, where the question has one


@dataclass
class Blocks:
    """A plain `Corpus`: the blocks' titles and texts."""

    titles: list[str]
    texts: list[str]

    @property
    def corpus_size(self) -> int:
        return len(self.texts)


@dataclass
class Question:
    """A plain `Query`: a question's text, no gold passage."""

    question: str
    passage: int | None = None


@dataclass
class Sources:
    """What a retriever may build itself from: the artifact store, the blocks artifact, the
    frozen document embeddings' config (dense), the query encoder and its tokenizer, the query
    length and batch, and a progress reporter for what a build computes (block embeddings)."""

    store: Any = None
    blocks_ref: Any = None
    doc_embed: Any = None      # EmbedConfig of the frozen block embeddings
    query_encoder: Any = None  # RetrieverEncoder
    tokenizer: Any = None
    question_length: int = 32
    batch_size: int = 64       # questions embedded at a time when proposing
    progress: Any = None
    knowledge: Any = None      # a KnowledgeVersion: search its live blocks with its vectors (else the corpus's)


@dataclass
class Proposal:
    ids: np.ndarray     # (B, K) block ids
    scores: np.ndarray  # (B, K) the retriever's scores for them (float32)


def _key(candidates: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(candidates, dtype=np.int64).tobytes(), usedforsecurity=False).hexdigest()


class Retriever:
    """Base: proposes nothing; subclasses say what they retrieve."""

    name: ClassVar[str] = "none"
    trainable: ClassVar[bool] = False
    retrieves: ClassVar[bool] = False            # proposes blocks at all
    needs_query_encoder: ClassVar[bool] = False  # a (trainable) query encoder
    needs_passage: ClassVar[bool] = False        # each question's own gold passage (SQuAD only)

    def __init__(self, blocks: Corpus, top_k: int) -> None:
        self.blocks, self.top_k = blocks, top_k

    @classmethod
    def check(cls, sources: Sources) -> None:
        """Raise what `build` would find missing in `sources`, before the caller reads the blocks
        (so the error names what is really missing); by default nothing is checked."""

    @classmethod
    def build(cls, blocks: Corpus, top_k: int, sources: Sources) -> Retriever:
        """The retriever over `blocks`, loading what it needs from `sources`."""
        return cls(blocks, top_k)

    def propose(self, questions: list[Any], candidates: np.ndarray | None = None) -> Proposal:
        """(B, K) blocks per question, best first, no gradient; with `candidates` (C,) only those
        blocks are searched (K = min(top_k, C))."""
        empty = np.zeros((len(questions), 0))
        return Proposal(empty.astype(np.int64), empty.astype(np.float32))

    def logits(self, questions: list[Any], proposal: Proposal) -> torch.Tensor:
        """(B, K) retrieval logits of the proposed blocks."""
        return torch.from_numpy(proposal.scores.astype(np.float32))

    def stale(self) -> bool:
        """Whether what it was built from has moved on, so a long-lived caller builds it again."""
        return False


class GoldPassage(Retriever):
    """Each question's own gold passage (SQuAD's paragraph): the reader's ceiling, and the
    first, cheap phase of reader training (DPR's reader trains on gold passages too)."""

    name = "gold"
    retrieves = True
    needs_passage = True

    def propose(self, questions: list[Any], candidates: np.ndarray | None = None) -> Proposal:
        missing = [getattr(q, "qid", q.question) for q in questions if q.passage is None]
        if missing:
            raise ValueError(f"questions without a gold passage: {missing[:3]}")
        ids = np.asarray([[q.passage] for q in questions], dtype=np.int64)
        return Proposal(ids, np.zeros(ids.shape, dtype=np.float32))


class BM25(Retriever):
    """bm25s over title + body (English stop words, Snowball stemmer); its scores are the logits.
    A candidate subset gets an index of its own, built once."""

    name = "bm25"
    retrieves = True

    def __init__(self, blocks: Corpus, top_k: int, ids: np.ndarray | None = None) -> None:
        import Stemmer

        super().__init__(blocks, top_k)
        self._stemmer = Stemmer.Stemmer("english")
        self._indexes: dict[str, tuple[Any, np.ndarray]] = {}
        # the blocks searched by default: every corpus block, or a knowledge corpus's live ones
        self.ids = np.arange(blocks.corpus_size, dtype=np.int64) if ids is None else ids
        self._index(self.ids)

    @classmethod
    def build(cls, blocks: Corpus, top_k: int, sources: Sources) -> Retriever:
        return cls(blocks, top_k, sources.knowledge.block_ids if sources.knowledge is not None else None)

    def _index(self, candidates: np.ndarray) -> tuple[Any, np.ndarray]:
        import bm25s

        key = _key(candidates)
        if key not in self._indexes:
            texts = [f"{self.blocks.titles[b]} {self.blocks.texts[b]}" for b in candidates]
            index = bm25s.BM25()
            index.index(bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer, show_progress=False),
                        show_progress=False)
            self._indexes[key] = (index, candidates)
        return self._indexes[key]

    def propose(self, questions: list[Any], candidates: np.ndarray | None = None) -> Proposal:
        import bm25s

        index, among = self._index(self.ids if candidates is None else candidates)
        tokens = bm25s.tokenize([q.question for q in questions], stopwords="en", stemmer=self._stemmer,
                                return_ids=False, show_progress=False)
        tokens = [t if t else ["[empty]"] for t in tokens]  # a stop-word-only question
        rows, scores = index.retrieve(tokens, k=min(self.top_k, len(among)), show_progress=False)  # (B, K)
        return Proposal(among[np.asarray(rows, dtype=np.int64)], np.asarray(scores, dtype=np.float32))


def embed_questions(query_encoder: Any, tokenizer: Any, texts: list[str], max_length: int) -> torch.Tensor:
    """(B, D) query embeddings of `texts`, cut to `max_length` wordpieces (the encoder's mode kept:
    a training step's dropout stays on)."""
    enc = tokenizer(texts, truncation=True, max_length=max_length, return_attention_mask=False)["input_ids"]
    ids, mask = pad_sequences(enc, tokenizer.pad_token_id)
    device = module_device(query_encoder)
    out: torch.Tensor = query_encoder(ids.to(device), mask.to(device)).float()
    return out


class Dense(Retriever):
    """A query encoder against frozen block embeddings (faiss flat inner product); the logits are
    recomputed with the current query encoder, so it learns without re-embedding."""

    name = "dense"
    trainable = True
    retrieves = True
    needs_query_encoder = True

    def __init__(self, blocks: Corpus, top_k: int, query_encoder: Any, tokenizer: Any,
                 block_vectors: np.ndarray, question_length: int, batch_size: int = 64,
                 ids: np.ndarray | None = None) -> None:
        super().__init__(blocks, top_k)
        self.query_encoder, self.tokenizer = query_encoder, tokenizer
        self.question_length, self.batch_size = question_length, batch_size
        self.vectors = torch.from_numpy(np.ascontiguousarray(block_vectors, dtype=np.float32))  # (N, D) rows by id
        self._indexes: dict[str, Any] = {}
        # the blocks searched by default: every row, or a knowledge corpus's live ids
        self.ids = np.arange(len(block_vectors), dtype=np.int64) if ids is None else ids
        self._index(self.ids)

    def _index(self, candidates: np.ndarray) -> Any:
        from realm_core.retrieval.index import MipsIndex

        key = _key(candidates)
        if key not in self._indexes:
            index = MipsIndex.build(self.vectors.shape[1], "Flat")
            index.add(self.vectors.numpy()[candidates], candidates)
            self._indexes[key] = index
        return self._indexes[key]

    @classmethod
    def build(cls, blocks: Corpus, top_k: int, sources: Sources) -> Retriever:
        """The block embeddings of `sources.doc_embed`: a knowledge corpus's vectors by that
        document encoder, or the embed stage's of the corpus (computed through the cache if missing)."""
        from pathlib import Path

        from realm_core.retrieval.embed import load_embeddings
        from realm_core.retrieval.stage import encoder_hash, run_embed_blocks

        ids = None
        if sources.knowledge is not None:
            vectors = sources.knowledge.vectors(encoder_hash(sources.doc_embed.doc_encoder), dense=True)  # (M, D)
            ids, where = sources.knowledge.block_ids, str(sources.knowledge.path)
        else:
            emb = sources.store.open(run_embed_blocks(sources.store, sources.blocks_ref, sources.doc_embed,
                                                      sources.progress).ref, kind="embeddings")
            vectors = load_embeddings(Path(emb.path) / "embeddings", emb.manifest["embeddings"], blocks.corpus_size)
            where = emb.path
        if vectors.shape[1] != sources.query_encoder.projection_dim:
            raise ConfigError(f"{where}: block embeddings of dimension {vectors.shape[1]}, the query "
                              f"encoder gives {sources.query_encoder.projection_dim}")
        return cls(blocks, top_k, sources.query_encoder, sources.tokenizer, vectors, sources.question_length,
                   sources.batch_size, ids)

    def embed(self, questions: list[Any]) -> torch.Tensor:
        return embed_questions(self.query_encoder, self.tokenizer, [q.question for q in questions],
                               self.question_length)

    def propose(self, questions: list[Any], candidates: np.ndarray | None = None) -> Proposal:
        index = self._index(self.ids if candidates is None else candidates)
        with torch.no_grad():
            q = torch.cat([self.embed(questions[i:i + self.batch_size])
                           for i in range(0, len(questions), self.batch_size)]) if questions else \
                torch.zeros((0, self.vectors.shape[1]))  # (B, D)
        scores, ids = index.search(q.cpu().numpy(), min(self.top_k, len(index)))  # (B, K)
        return Proposal(np.asarray(ids, dtype=np.int64), np.asarray(scores, dtype=np.float32))

    def logits(self, questions: list[Any], proposal: Proposal) -> torch.Tensor:
        q = self.embed(questions)  # (B, D)
        vectors = self.vectors[torch.from_numpy(proposal.ids)].to(q.device)  # (B, K, D)
        return torch.einsum("bd,bkd->bk", q, vectors)  # (B, K)


def no_index(store: Any) -> MissingIndexError:
    return MissingIndexError(f"{store.root}/index: no index built yet (run `realm refresh-index`)")


class CurrentIndex(Retriever):
    """The index version `index/CURRENT` names (what the nightly refresh-index moves forward),
    queried with the query encoder that belongs to its document encoder (the sibling
    `query_encoder/` of the retriever or REALM model; an untrained bundled encoder is shared).
    Stale once CURRENT has moved on: a long-lived caller builds it again, and a search holding
    the old one finishes on it."""

    name = "index"
    retrieves = True

    def __init__(self, blocks: Corpus, top_k: int, store: Any, tokenizer: Any, question_length: int,
                 knowledge: Any = None) -> None:
        from pathlib import Path

        from realm_core.retrieval.encoders import RetrieverEncoder
        from realm_core.retrieval.index import MipsIndex
        from realm_core.retrieval.stage import encoder_hash
        from realm_core.retrieval.versions import current_step, encoder_dir, load_index

        super().__init__(blocks, top_k)
        self.store, self.knowledge = store, knowledge
        self.step = current_step(store)
        if self.step is None:
            raise no_index(store)
        self.index, art = load_index(store, self.step)
        self.artifact = art
        doc = encoder_dir(store, art)
        if knowledge is not None:  # the knowledge corpus's blocks, embedded by the same document encoder
            self.index = MipsIndex.build(self.index.dim, "Flat")
            self.index.add(knowledge.vectors(encoder_hash(doc)), knowledge.block_ids)
        sibling = Path(doc).parent / "query_encoder"
        self.encoder_dir = str(sibling) if doc.endswith("doc_encoder") and sibling.is_dir() else doc
        self.query_encoder = RetrieverEncoder.from_pretrained(self.encoder_dir).eval()
        self.tokenizer, self.question_length = tokenizer, question_length

    @classmethod
    def check(cls, sources: Sources) -> None:
        from realm_core.retrieval.versions import current_step

        if current_step(sources.store) is None:
            raise no_index(sources.store)

    @classmethod
    def build(cls, blocks: Corpus, top_k: int, sources: Sources) -> Retriever:
        return cls(blocks, top_k, sources.store, sources.tokenizer, sources.question_length, sources.knowledge)

    def propose(self, questions: list[Any], candidates: np.ndarray | None = None) -> Proposal:
        if candidates is not None:
            raise ValueError("the current index searches every block it holds; it takes no candidates")
        with torch.inference_mode():
            q = embed_questions(self.query_encoder, self.tokenizer, [x.question for x in questions],
                                self.question_length).cpu().numpy()  # (B, D)
        scores, block_ids = self.index.search(q, self.top_k)  # (B, K)
        return Proposal(np.asarray(block_ids, dtype=np.int64), np.asarray(scores, dtype=np.float32))

    def stale(self) -> bool:
        """The index pointer moved on (a nightly refresh), or the knowledge corpus's did."""
        from realm_core.knowledge.versions import KnowledgeCorpus
        from realm_core.retrieval.versions import current_step

        knowledge = KnowledgeCorpus.of_store(self.store).current_number() if self.store.local else None
        return bool(current_step(self.store) != self.step
                    or knowledge != (self.knowledge.number if self.knowledge is not None else None))


RETRIEVERS: dict[str, type[Retriever]] = {"none": Retriever, "gold": GoldPassage, "bm25": BM25, "dense": Dense,
                                          "index": CurrentIndex}
