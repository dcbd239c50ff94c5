"""The query side: search the blocks with a retriever, or ask a fine-tuned open-QA system.

`QueryEngine` resolves what it needs through the stage graph (the blocks, a retriever's
encoders, a system's fine-tuned reader: cache hits after `make demo`) and keeps each loaded model
for the next query. It never computes a stage: what the pipeline has not produced for this config
and code is a MissingArtifactError naming the stage. A dense search embeds the query with the retriever's query encoder against
the block embeddings of its document encoder (the ones its index holds); `ask` reads the top-k
blocks with the system's fine-tuned span reader in the form and retrieval temperature that the
newest evaluation chose on dev, or the training ones when there is no evaluation yet.

Shapes: B queries, D embedding dim.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from realm_core.config import PipelineConfig
from realm_core.errors import MissingArtifactError, QueryError
from realm_core.graph.resolver import Hook, Resolver, StageRun
from realm_core.graph.stages import GOLD_STAGES, Stage, StageInputs, qa_keys, qa_system, stage
from realm_core.knowledge.versions import KnowledgeCorpus, KnowledgeVersion
from realm_core.openqa.predict import Prediction, predict
from realm_core.openqa.reading import BlockStore, QAQuestion
from realm_core.retrieval.retrievers import (
    BM25,
    RETRIEVERS,
    CurrentIndex,
    Dense,
    Retriever,
    Sources,
)
from realm_core.store.artifacts import ArtifactRef
from realm_core.store.cache import existing_artifacts_only
from realm_core.systems import ASKABLE, DEFAULT_ASK, SYSTEM_NAMES, SYSTEMS

# what `realm search --retriever NAME` searches with: a retriever of the registry, and the
# open-QA system whose encoders (and their block embeddings) it uses, where it needs them
SEARCHERS: dict[str, tuple[str, str | None]] = {
    "index": ("index", None), BM25.name: (BM25.name, None),
    **{s.key: (Dense.name, s.key) for s in SYSTEMS if s.searcher}}


@dataclass
class Hit:
    rank: int
    block_id: int
    score: float
    title: str
    snippet: str


@dataclass
class Answer:
    question: str
    system: str
    answer: str
    probability: float
    block_id: int | None
    title: str | None
    char_start: int
    char_end: int
    block_text: str | None
    block_ids: list[int]
    candidates: list[dict[str, Any]] = field(default_factory=list)


def check_query(text: str, limit: int, what: str = "query") -> str:
    """The query stripped; an empty or over-long one is a `QueryError`."""
    import unicodedata

    # zero-width and other format characters are invisible: a query of them alone is empty
    stripped = "".join(c for c in text if unicodedata.category(c) != "Cf").strip()
    if not stripped:
        raise QueryError(f"empty {what}: expected some text")
    if not any(c.isalnum() for c in stripped):
        raise QueryError(f"{what} {stripped[:40]!r}: expected a word or a number to match, found none")
    if len(stripped) > limit:
        raise QueryError(f"{what} of {len(stripped):,} characters: the limit is query.max_query_chars={limit:,}")
    return stripped


def existing_only(hook: Hook) -> Hook:
    """A resolver hook that runs `hook` with cache misses refused, naming the stage that has
    not run and what produces it (each upstream stage is resolved through its own call)."""
    def run(s: Stage, inputs: StageInputs) -> StageRun:
        try:
            with existing_artifacts_only():
                return hook(s, inputs)
        except MissingArtifactError as e:
            raise MissingArtifactError(
                f"stage {s.name!r} has not run with this config and code in {inputs.store.root}; the query "
                f"side serves what the pipeline produced: run `make demo`, or `realm pipeline` with the same "
                f"--preset/--config/--set (then `realm evaluate` for a fine-tuned system) ({e})") from None
    return run


@dataclass
class LoadedSystem:
    """An askable system, loaded: its reader (and query encoder), its retriever over the blocks,
    the marginal form and retrieval temperature it answers in, and its name."""

    models: Any
    retriever: Retriever
    form: str
    temperature: float | None
    name: str


class Answerer:
    """The query side over a knowledge corpus: search it with a named searcher, ask a system.
    Subclasses say where the blocks, the searchers and the systems come from: `QueryEngine` (an
    artifact store, through the stage graph) and `BundleEngine` (an exported system,
    realm_core/system_bundle.py). Loaded models are kept for the next query."""

    searchers: dict[str, tuple[str, str | None]] = SEARCHERS

    def __init__(self, cfg: PipelineConfig, corpus: KnowledgeCorpus | None) -> None:
        self.cfg = cfg
        self._blocks: BlockStore | None = None
        self._loaded: dict[str, Any] = {}
        self._corpus = corpus
        self._knowledge: KnowledgeVersion | None = None

    # --- where things come from (each engine its own) ---

    def _tokenizer_source(self) -> str:
        raise NotImplementedError

    def _corpus_blocks(self) -> BlockStore:
        """The blocks answered from when there is no knowledge corpus."""
        raise NotImplementedError

    def _retriever(self, kind: str, system_key: str | None, top_k: int | None = None,
                   query_encoder_dir: str | None = None) -> Retriever:
        raise NotImplementedError

    def _load_system(self, key: str) -> LoadedSystem:
        raise NotImplementedError

    def placement(self) -> Any:
        """Where and how the query side's forwards run: on the CPU, in `query.precision` (`auto`:
        bf16 autocast where the CPU computes it natively)."""
        import torch

        from realm_core.distributed import Placement

        return Placement(torch.device("cpu"), self.cfg.query.precision)

    def for_inference(self, model: Any) -> Any:
        """A loaded reader or query encoder as the query side runs it: in eval mode, and int8
        dynamic quantization with `query.precision: int8`."""
        return self.placement().for_inference(model)

    def default_system(self) -> tuple[str, str]:
        """(system key, why it is the default)."""
        raise NotImplementedError

    def health(self) -> dict[str, Any]:
        raise NotImplementedError

    def _check_models(self) -> int:
        """Check what this engine's models and searchers were loaded from against its manifests
        (`check_served`); the bytes checked."""
        raise NotImplementedError

    def check_served(self) -> int:
        """Check every file answers come from before a search or a question is answered: the
        current knowledge version's files and what the models were loaded from, each against its
        manifest (size always; sha256 once per process while a file's size and mtime stay, so a
        request costs a stat of each). A damaged file is a `CorruptArtifactError` naming it (the
        CLI's `error:` with exit 2, the service's 503) rather than an answer from damaged bytes.
        The bytes checked."""
        knowledge = self.knowledge()
        return self._check_models() + (knowledge.verify() if knowledge is not None else 0)

    def describe(self) -> dict[str, Any]:
        """What this engine serves, for the service's /healthz."""
        raise NotImplementedError

    def index_version(self, retriever: str) -> int | None:
        """The index version a search by `retriever` used, where it has one."""
        return None

    def knowledge(self) -> KnowledgeVersion | None:
        """The current version of the knowledge corpus (`realm add`), or None when the blocks
        answered from are the pretraining corpus's. When its pointer has moved on, what was built
        on the old blocks (the blocks, searchers, systems' retrievers) is dropped and built again."""
        number = self._corpus.current_number() if self._corpus is not None else None
        if number != (self._knowledge.number if self._knowledge is not None else None):
            self._knowledge = self._corpus.version(number) if self._corpus is not None and number else None
            self._blocks = None
            self._loaded = {k: v for k, v in self._loaded.items() if k == "tokenizer"}
        return self._knowledge

    @property
    def tokenizer(self) -> Any:
        from realm_core.bert import load_tokenizer

        if "tokenizer" not in self._loaded:
            # its own copy: a fast tokenizer's truncation state changes with each call, and the
            # cached shared one may be in use by other work in this process (a refresh, training)
            self._loaded["tokenizer"] = copy.deepcopy(load_tokenizer(self._tokenizer_source()))
        return self._loaded["tokenizer"]

    @property
    def blocks(self) -> BlockStore:
        """The blocks answered from: the knowledge corpus's current version (indexed by stable
        block id; "" where an id has no live block), or the pretraining corpus's."""
        knowledge = self.knowledge()
        if self._blocks is None:
            if knowledge is not None:
                self._blocks = BlockStore(knowledge.dense("title"), knowledge.dense("text"), self.tokenizer)
            else:
                self._blocks = self._corpus_blocks()
        return self._blocks

    @property
    def max_k(self) -> int:
        """The most blocks a search returns: `query.max_k`, or every block of a smaller corpus."""
        knowledge = self.knowledge()
        return min(self.cfg.query.max_k, len(knowledge.block_ids) if knowledge is not None else len(self.blocks))

    def loaded_models(self) -> list[str]:
        """What is loaded so far: searchers (`search:NAME`) and askable systems."""
        return [k for k in self._loaded if k != "tokenizer"]

    def searcher(self, name: str) -> Retriever:
        """Searcher `name`, loaded once and loaded again when stale (the current index after
        `index/CURRENT` has moved on: a new object replaces the old one, so a search holding the
        old one finishes on it)."""
        if name not in self.searchers:
            raise QueryError(f"retriever {name!r}: expected one of {', '.join(self.searchers)}")
        self.knowledge()  # a new knowledge version drops every searcher built on the old blocks
        loaded: Retriever | None = self._loaded.get(f"search:{name}")
        if loaded is None or loaded.stale():
            kind, system_key = self.searchers[name]
            loaded = self._retriever(kind, system_key)
            self._loaded[f"search:{name}"] = loaded
        return loaded

    def search(self, queries: list[str], retriever: str = "index", k: int = 10) -> list[list[Hit]]:
        """The top-k blocks of each query, best first, with the retriever's own scores."""
        if not 1 <= k <= self.cfg.query.max_k:
            raise QueryError(f"k={k}: expected 1 to query.max_k={self.cfg.query.max_k}")
        texts = [check_query(q, self.cfg.query.max_query_chars) for q in queries]
        searcher = self.searcher(retriever)
        self.check_served()
        proposal = searcher.propose([QAQuestion(str(i), t, ()) for i, t in enumerate(texts)])
        snippet = self.cfg.query.snippet_chars
        out = []
        for ids, scores in zip(proposal.ids[:, :k], proposal.scores[:, :k], strict=True):
            out.append([Hit(r + 1, int(z), float(s), self.blocks.titles[int(z)], self.blocks.texts[int(z)][:snippet])
                        for r, (z, s) in enumerate(zip(ids, scores, strict=True)) if z >= 0])
        return out

    def _system(self, key: str) -> LoadedSystem:
        """System `key`, loaded once (again after a new knowledge version)."""
        self.knowledge()  # a new knowledge version drops the retrievers built on the old blocks
        if key not in self._loaded:
            self._loaded[key] = self._load_system(key)
        loaded: LoadedSystem = self._loaded[key]
        return loaded

    def ask(self, questions: list[str], system: str) -> list[Answer]:
        """Each question's answer by `system`'s fine-tuned reader over its top-k blocks."""
        texts = [check_query(q, self.cfg.query.max_query_chars, "question") for q in questions]
        loaded = self._system(system)
        self.check_served()
        config = self.cfg.finetune.model_copy(update={"form": loaded.form})
        qs = [QAQuestion(str(i), t, ()) for i, t in enumerate(texts)]
        reading = self.cfg.openqa_eval
        preds: list[Prediction] = predict(loaded.models, loaded.retriever, qs, self.blocks, self.tokenizer, config,
                                          reading.answer_candidates, reading.batch_size,
                                          temperatures=(loaded.temperature,), placement=self.placement(),
                                          row_tokens=reading.reader_tokens)[loaded.temperature]
        out = []
        for text, p in zip(texts, preds, strict=True):
            z = p.block
            out.append(Answer(text, loaded.name, p.answer, p.score if math.isfinite(p.score) else 0.0, z,
                              self.blocks.titles[z] if z is not None else None, p.char_start, p.char_end,
                              self.blocks.texts[z] if z is not None else None, p.block_ids,
                              [{"answer": a, "probability": s} for a, s in p.candidates]))
        return out


class QueryEngine(Answerer):
    """The query side of an artifact store: the blocks, searchers and systems the pipeline
    produced for this config, resolved through the stage graph and never computed."""

    def __init__(self, stages: Resolver) -> None:
        stages = Resolver(stages.cfg, stages.store, existing_only(stages.hook), progress=stages.progress)
        super().__init__(stages.cfg, KnowledgeCorpus.of_store(stages.store) if stages.store.local else None)
        self.stages = stages
        self._evaluations: dict[tuple[str, str], tuple[str, str, dict[str, Any]]] = {}

    def _tokenizer_source(self) -> str:
        return str(self.cfg.pretrain.reader_encoder)

    def _corpus_blocks(self) -> BlockStore:
        table = self.stages.store.open(self.stages.ref("chunk"), kind="blocks").read_table("blocks", ["title", "text"])
        return BlockStore(table.column("title").to_pylist(), table.column("text").to_pylist(), self.tokenizer)

    def describe(self) -> dict[str, Any]:
        return {"artifact_root": str(self.stages.store.root), "preset": self.cfg.preset}

    def index_version(self, retriever: str) -> int | None:
        return self.current_index().step if self.searchers.get(retriever, ("", None))[0] == "index" else None

    def _refs(self, key: str) -> dict[str, ArtifactRef | None]:
        """The refs system `key` is built from: its fine-tuning stage's upstream in the graph."""
        # what defines the system (its encoders, its reader start), not its training: no questions
        # or gold-paragraph reader (the fine-tuned model, resolved apart, needs those)
        needs = [u for u in stage(f"finetune_{key}").upstream(self.cfg)
                 if u not in ("chunk", "questions", *GOLD_STAGES.values())]
        return {n: self.stages.run(n).ref for n in needs}

    def _retriever(self, kind: str, system_key: str | None, top_k: int | None = None,
                   query_encoder_dir: str | None = None) -> Retriever:
        """Retriever `kind` of the registry over the blocks, `top_k` of them a query (default:
        `max_k`); with a system, over that system's block embeddings and with its query encoder
        (or the one in `query_encoder_dir`)."""
        from realm_core.retrieval.encoders import RetrieverEncoder

        sources = Sources(self.stages.store, question_length=self.cfg.finetune.question_length,
                          tokenizer=self.tokenizer, knowledge=self.knowledge())
        if system_key is not None:
            system = qa_system(self.cfg, self._refs(system_key), system_key)
            sources.blocks_ref, sources.doc_embed = self.stages.ref("chunk"), system.doc_embed
            encoder_dir = query_encoder_dir or system.query_encoder
            if encoder_dir is not None:
                sources.query_encoder = self.for_inference(RetrieverEncoder.from_pretrained(encoder_dir))
        RETRIEVERS[kind].check(sources)  # before the blocks are read: what is missing is named
        try:
            with existing_artifacts_only():  # the blocks embedded by its document encoder, not embedded here
                return RETRIEVERS[kind].build(self.blocks, self.max_k if top_k is None else top_k, sources)
        except MissingArtifactError as e:
            if system_key is None:
                raise
            raise MissingArtifactError(f"{system_key}: its document encoder's block embeddings are not in the "
                                       f"store; `realm evaluate --system {system_key}` computes them ({e})") from None

    def health(self) -> dict[str, Any]:
        """What is served, its files checked against their manifests as the store checks a cache
        hit (sizes, and sha256 on a local disk; each file hashed again only once it changed):
        the current index version (loaded if it is not yet) and every artifact resolved so far
        (the blocks, each loaded system's models). Raises what cannot be read: a
        `MissingIndexError` before any index is built, a `CorruptArtifactError`, an `OSError`."""
        index = self.current_index()
        checked = self.check_served()
        knowledge = self.knowledge()
        return {"index_version": index.step, "index_blocks": len(index.index), "index_encoder": index.encoder_dir,
                "knowledge_version": knowledge.number if knowledge is not None else None,
                "loaded": sorted(self.loaded_models()),
                "artifacts_checked": len(self._served_artifacts()) + (knowledge is not None),
                "bytes_checked": checked, "verify": self.stages.store.verify}

    def _served_artifacts(self) -> list[Any]:
        """The current index, where it is loaded, and every artifact resolved so far (the blocks,
        each loaded system's models)."""
        store = self.stages.store
        index = self._loaded.get("search:index")
        arts = [index.artifact] if isinstance(index, CurrentIndex) else []
        return arts + [store.open(r.ref) for r in self.stages.runs.values() if r.ref is not None]

    def _check_models(self) -> int:
        return sum(a.verify(self.stages.store.verify) for a in self._served_artifacts())

    def current_index(self) -> CurrentIndex:
        """The current index version, reloaded when `index/CURRENT` has moved on (a
        `MissingIndexError` before any is built)."""
        index = self.searcher("index")
        assert isinstance(index, CurrentIndex)
        return index

    def default_system(self) -> tuple[str, str]:
        """(system key, why): the best system by SQuAD-open dev EM in the newest evaluation, or
        BM25 + reader when none exists."""
        newest = self._newest_evaluation()
        if newest is not None:
            by_name = {v: k for k, v in SYSTEM_NAMES.items()}
            fitted = {by_name[n]: t["dev_em"] for n, t in newest["temperatures"].items() if n in by_name}
            scores = {k: max(v.values()) for k, v in fitted.items() if k in ASKABLE and k in qa_keys(self.cfg)}
            if scores:
                best = max(scores, key=lambda k: scores[k])
                return best, (f"{SYSTEM_NAMES[best]}: the best by dev EM ({100 * scores[best]:.1f}) in the newest "
                              f"evaluation, {newest['path']}")
        return DEFAULT_ASK.key, f"{DEFAULT_ASK.name}: no open-QA evaluation in this artifact root yet"

    def _newest_evaluation(self) -> dict[str, Any] | None:
        """The newest open-QA evaluation in the store. Each manifest is read once per version (a
        `--force` rerun publishes a new one at the same path), so a question costs a listing."""
        store = self.stages.store
        current = {}
        for manifest in store.fs.glob(f"{store.root}/openqa_eval/*/manifest.json"):
            info = store.fs.info(manifest)
            version = (manifest, str(info.get("mtime", info.get("LastModified", info.get("size")))))
            if version not in self._evaluations:
                art = store.open(manifest.rsplit("/", 1)[0])
                self._evaluations[version] = (str(art.manifest.get("created_at", "")), art.path,
                                              art.manifest.get("temperatures", {}))
            current[version] = self._evaluations[version]
        self._evaluations = current
        if not current:
            return None
        created, path, temperatures = max(current.values())
        return {"path": path, "temperatures": temperatures}

    def _newest_evaluation_artifact(self) -> Any:
        """The newest open-QA evaluation artifact in the store (its results), or None."""
        newest = self._newest_evaluation()
        return self.stages.store.open(newest["path"]) if newest is not None else None

    def _load_system(self, key: str) -> LoadedSystem:
        """System `key`'s fine-tuned reader and retriever, in the form and retrieval temperature
        the newest evaluation fit on dev (else the training ones)."""
        from realm_core.openqa.predict import QAModels
        from realm_core.openqa.span_reader import SpanReader

        if key not in ASKABLE:
            raise QueryError(f"system {key!r}: expected one of {', '.join(ASKABLE)}")
        system = qa_system(self.cfg, self._refs(key), key)
        model = self.stages.ref(f"finetune_{key}")
        reader = self.for_inference(SpanReader.from_pretrained(f"{model.path}/reader", self.cfg.finetune.max_span_length))
        trained = f"{model.path}/query_encoder" if RETRIEVERS[system.retrieval].needs_query_encoder else None
        retriever = self._retriever(system.retrieval, key, min(self.cfg.finetune.top_k, len(self.blocks)), trained)
        form, temperature = self.cfg.finetune.form, self.cfg.finetune.train_temperature(retriever.name)
        newest = self._newest_evaluation()
        if newest is not None and (fit := newest["temperatures"].get(system.name)) is not None:
            form, temperature = fit["form"], fit["temperature"]
        return LoadedSystem(QAModels(reader, getattr(retriever, "query_encoder", None)), retriever, form,
                            temperature, system.name)
