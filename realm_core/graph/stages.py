"""The stages of the pipeline, declared once: each stage's config sections, upstream stages and
runner (one call into realm_core), `STAGES` in pipeline order, and `STAGE_FLOWS`, the Prefect
flows (and deployments) that own them. How a stage is run: `realm_core.graph.resolver`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from realm_core.config import EmbedConfig, PipelineConfig
from realm_core.errors import ConfigError
from realm_core.progress import NoProgress, Progress
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.systems import BY_KEY, SYSTEMS

JobMap = Callable[[Callable[[Any], Any], list[Any]], Iterator[Any]]  # (job function, jobs) -> results in order
RefreshIndex = Callable[[EmbedConfig, str], None]                    # (embed config, index root)
# the first phase of fine-tuning, one gold-paragraph reader stage per reader start: the baseline
# reader (MiniLM, or its masked-LM warm-up), REALM's pretrained reader, the null-only run's
GOLD_STAGES = {"baseline": "gold_reader", "realm": "gold_reader_realm", "null": "gold_reader_null"}


@dataclass
class StageInputs:
    """What a runner gets: the config, the store, its upstream stages' refs by stage name."""

    cfg: PipelineConfig
    store: ArtifactStore
    refs: dict[str, ArtifactRef | None]
    progress: Progress = field(default_factory=NoProgress)
    force: bool = False
    map_jobs: JobMap | None = None          # a fanning-out stage's jobs run elsewhere (Dask)
    refresh_index: RefreshIndex | None = None


@dataclass(frozen=True)
class Stage:
    name: str
    title: str                                         # for reports
    sections: tuple[str, ...]                          # config sections the stage reads
    upstream: Callable[[PipelineConfig], tuple[str, ...]]
    run: Callable[[StageInputs], StageResult | None]   # None: the stage is off in this config
    fans_out: bool = False                             # its runner takes `map_jobs` (source files, shards)
    distributed: bool = False                          # runs on every torchrun rank, not rank 0 alone
    variant: Callable[[PipelineConfig], PipelineConfig] | None = None  # the config the stage runs on
    flow: str | None = None                            # the Prefect flow (and deployment) that owns it;
                                                       # None: resolved as a task inside the first flow that needs it

    def runs_on(self, cfg: PipelineConfig) -> PipelineConfig:
        """The config this stage's runner gets: `variant` of the pipeline's (idempotent), or it."""
        return self.variant(cfg) if self.variant else cfg

    def config(self, cfg: PipelineConfig) -> dict[str, Any]:
        cfg = self.runs_on(cfg)
        return {s: getattr(cfg, s).model_dump(mode="json") for s in self.sections}


# --- runners: one call into realm_core each -------------------------------------------------

def _ingest(i: StageInputs) -> StageResult:
    from realm_core.ingest.stage import run_ingest

    return run_ingest(i.store, i.cfg.ingest, i.progress, force=i.force, map_sources=_mapper(i, "ingest"))


def _chunk(i: StageInputs) -> StageResult:
    from realm_core.blocks import run_chunk

    return run_chunk(i.store, _ref(i, "ingest"), i.cfg.chunk, i.progress, force=i.force)


def _spans(i: StageInputs) -> StageResult:
    from realm_core.spans.mining import run_mine_spans

    return run_mine_spans(i.store, _ref(i, "chunk"), i.cfg.spans, i.progress, force=i.force,
                          map_shards=_mapper(i, "spans"), encoder=i.cfg.chunk.encoder)


def _ict(i: StageInputs) -> StageResult:
    from realm_core.retrieval.warm_start import run_warm_start_ict

    return run_warm_start_ict(i.store, _ref(i, "chunk"), _ref(i, "spans"), i.cfg.ict, i.progress, force=i.force)


def _retromae(i: StageInputs) -> StageResult:
    from realm_core.retrieval.warm_start import run_warm_start_retromae

    return run_warm_start_retromae(i.store, _ref(i, "chunk"), i.cfg.retromae, i.progress, force=i.force)


def index_embed_config(cfg: PipelineConfig, store: ArtifactStore, refs: dict[str, ArtifactRef | None]) -> EmbedConfig:
    """`embed` with the index's document encoder resolved (`embed.encoder_from`)."""
    from realm_core.retrieval.warm_start import doc_encoder_dir, latest_retriever

    encoder = cfg.embed.doc_encoder
    if cfg.embed.encoder_from == "warm_start" and cfg.pretrain.warm_start != "none":
        encoder = doc_encoder_dir(required_ref(refs, cfg.pretrain.warm_start))
    elif cfg.embed.encoder_from == "latest" and (newest := latest_retriever(store)) is not None:
        encoder = doc_encoder_dir(newest)
    return cfg.embed.model_copy(update={"doc_encoder": encoder, "encoder_from": "config"})


def _embed(i: StageInputs) -> StageResult:
    from realm_core.retrieval.stage import run_embed_blocks

    return run_embed_blocks(i.store, _ref(i, "chunk"), index_embed_config(i.cfg, i.store, i.refs), i.progress,
                            force=i.force, map_shards=_mapper(i, "embed"))


def _index(i: StageInputs) -> StageResult:
    from realm_core.retrieval.stage import run_build_index

    return run_build_index(i.store, _ref(i, "embed"), _ref(i, "chunk"), i.cfg.index, force=i.force)


def _retrieval_eval(i: StageInputs) -> StageResult:
    from realm_core.retrieval.evaluation import run_evaluate_retrieval, standard_systems

    c = i.cfg
    systems = standard_systems(_ref(i, "ict"), c.embed, c.ict.encoder, c.ict.projection_dim, c.ict.seed,
                               references=c.retrieval_eval.reference_rows)
    return run_evaluate_retrieval(i.store, _ref(i, "chunk"), systems, c.retrieval_eval, i.progress)


def _reader_mlm(i: StageInputs) -> StageResult | None:
    import os

    from realm_core.distributed import Placement
    from realm_core.pretrain.stage import run_warm_reader

    # under torchrun every rank trains it data parallel, as pretraining does
    placement = Placement.from_env(i.cfg.pretrain.device, i.cfg.pretrain.precision) \
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None
    return run_warm_reader(i.store, _ref(i, "chunk"), i.cfg.pretrain, placement, i.progress)


def _reader_copy(i: StageInputs) -> StageResult | None:
    from realm_core.pretrain.reader_copy import run_reader_copy
    from realm_core.pretrain.reader_mlm import reader_mlm_dir
    from realm_core.retrieval.stage import encoder_hash

    c = i.cfg
    if c.pretrain.reader_copy.steps <= 0:
        return None
    if c.pretrain.warm_start == "none":
        raise ConfigError("pretrain.reader_copy reads each span's holder block as a warm-started retriever "
                          "ranks it; pretrain.warm_start is none")
    warm = i.refs.get("reader_mlm")
    start, start_hash = ((reader_mlm_dir(warm), warm.content_hash) if warm is not None
                         else (c.pretrain.reader_encoder, encoder_hash(c.pretrain.reader_encoder)))
    return run_reader_copy(i.store, _ref(i, "chunk"), _ref(i, "spans"), _ref(i, c.pretrain.warm_start), start,
                           start_hash, c.pretrain, c.masking, c.embed, i.progress, force=i.force,
                           chunk_encoder=c.chunk.encoder)


def _pretrain(i: StageInputs) -> StageResult:
    from realm_core.pretrain.stage import run_pretrain

    c = i.cfg
    retriever = _ref(i, c.pretrain.warm_start) if c.pretrain.warm_start != "none" else None
    return run_pretrain(i.store, _ref(i, "chunk"), _ref(i, "spans"), retriever, c.pretrain, c.masking, c.embed,
                        c.index, i.progress, force=i.force, refresh_index=i.refresh_index,
                        chunk_encoder=c.chunk.encoder, reader_start=i.refs.get("reader_copy"))


def _realm_gain(i: StageInputs) -> StageResult | None:
    from realm_core.pretrain.gain import run_realm_gain

    c = i.cfg
    if not c.gain.enabled:
        return None
    if c.pretrain.retrieval != "realm" or c.pretrain.warm_start == "none":
        raise ConfigError("gain.enabled compares REALM with null-only: it needs pretrain.retrieval realm "
                          "and a warm start (pretrain.warm_start)")
    return run_realm_gain(i.store, _ref(i, "chunk"), _ref(i, "spans"), _ref(i, c.pretrain.warm_start),
                          _ref(i, "pretrain"), _ref(i, "pretrain_null"), c, force=i.force)


def null_only(cfg: PipelineConfig) -> PipelineConfig:
    """The same pretraining run with the null block alone (REALM Table 2's BERT baseline): the
    config `experiments/pretrain.py`'s null-only row resolves, so the two share one cached artifact."""
    return cfg.model_copy(update={"pretrain": cfg.pretrain.model_copy(update={"retrieval": "null_only"})})


def _questions(i: StageInputs) -> StageResult:
    from realm_core.openqa.questions_stage import run_load_questions

    return run_load_questions(i.store, i.cfg.questions)


def qa_system(cfg: PipelineConfig, refs: dict[str, ArtifactRef | None], key: str) -> Any:
    """The `QASystem` of Table 1 row `key` from its upstream refs."""
    from realm_core.openqa.finetune_stage import baseline_reader, qa_systems

    reader = baseline_reader(refs.get("reader_mlm"), cfg.pretrain, cfg.finetune)
    systems = qa_systems(refs.get("ict"), refs.get("pretrain"), cfg.embed, reader, refs.get("pretrain_null"))
    return next(s for s in systems if s.key == key)


def _gold_reader_start(start: str, i: StageInputs) -> str:
    """The BERT directory a gold stage's reader starts from."""
    from realm_core.openqa.finetune_stage import baseline_reader

    if start == "baseline":
        return baseline_reader(i.refs.get("reader_mlm"), i.cfg.pretrain, i.cfg.finetune)
    return f"{_ref(i, 'pretrain' if start == 'realm' else 'pretrain_null').path}/reader"


def _gold(start: str) -> Callable[[StageInputs], StageResult | None]:
    def run(i: StageInputs) -> StageResult | None:
        from realm_core.openqa.finetune_stage import run_gold_reader

        return run_gold_reader(i.store, _ref(i, "questions"), _gold_reader_start(start, i),
                               i.cfg.finetune.span_reader(), i.progress, force=i.force)
    return run


def _gold_of(key: str) -> str | None:
    """The gold stage system `key` reads after (None: the system is not fine-tuned)."""
    return next((u for u in BY_KEY[key].needs if u in GOLD_STAGES.values()), None)


def _finetuner(key: str) -> Callable[[StageInputs], StageResult]:
    def run(i: StageInputs) -> StageResult:
        from realm_core.openqa.finetune_stage import run_finetune

        gold = _gold_of(key)
        return run_finetune(i.store, _ref(i, "chunk"), _ref(i, "questions"), qa_system(i.cfg, i.refs, key),
                            i.refs.get(gold) if gold else None, i.cfg.finetune, i.progress, force=i.force)
    return run


def _openqa_eval(i: StageInputs) -> StageResult:
    from realm_core.openqa.evaluation import run_evaluate_openqa

    entries = [(qa_system(i.cfg, i.refs, k), i.refs.get(f"finetune_{k}")) for k in qa_keys(i.cfg)]
    return run_evaluate_openqa(i.store, _ref(i, "chunk"), _ref(i, "questions"), entries, i.cfg.finetune,
                               i.cfg.openqa_eval, i.progress, gold_ref=i.refs.get("gold_reader"))


# --- upstream of each stage -------------------------------------------------------------------

def _warm_start(cfg: PipelineConfig) -> tuple[str, ...]:
    return () if cfg.pretrain.warm_start == "none" else (cfg.pretrain.warm_start,)


def qa_keys(cfg: PipelineConfig) -> list[str]:
    """The open-QA systems evaluated: `openqa_eval.systems`, those built from REALM pretraining
    only when pretraining retrieves."""
    return [k for k in dict.fromkeys(cfg.openqa_eval.systems)
            if not BY_KEY[k].pretrained or cfg.pretrain.retrieval == "realm"]


def finetune_targets(cfg: PipelineConfig, phases: tuple[str, ...] = ("gold", "open")) -> tuple[str, ...]:
    """The fine-tuning stages of the systems `openqa_eval.systems` names, in graph order: the
    gold-paragraph stages their reader starts need (phase `gold`) and each system's own
    fine-tuning (phase `open`, which needs its gold stage)."""
    keys = [k for k in qa_keys(cfg) if BY_KEY[k].finetuned]
    names = {g for k in keys if "gold" in phases and (g := _gold_of(k))}
    names |= {f"finetune_{k}" for k in keys} if "open" in phases else set()
    return tuple(s.name for s in STAGES if s.name in names)


def _reader_start(cfg: PipelineConfig) -> tuple[str, ...]:
    return ("reader_mlm",) if cfg.finetune.reader_start == "reader_mlm" else ()


def _qa_upstream(key: str) -> Callable[[PipelineConfig], tuple[str, ...]]:
    def upstream(cfg: PipelineConfig) -> tuple[str, ...]:
        return ("chunk", "questions", *_reader_start(cfg), *BY_KEY[key].needs)
    return upstream


def _eval_upstream(cfg: PipelineConfig) -> tuple[str, ...]:
    keys = qa_keys(cfg)
    names = ["chunk", "questions", *_reader_start(cfg), "gold_reader"]  # the gold-paragraph row's reader
    for k in keys:
        names += [u for u in _qa_upstream(k)(cfg) if u not in names]
    return (*names, *(f"finetune_{k}" for k in keys if BY_KEY[k].finetuned))


def _reader_copy_upstream(cfg: PipelineConfig) -> tuple[str, ...]:
    return ("chunk", "spans", *_warm_start(cfg), "reader_mlm") if cfg.pretrain.reader_copy.steps > 0 else ()


def _pretrain_upstream(cfg: PipelineConfig) -> tuple[str, ...]:
    copies = ("reader_copy",) if cfg.pretrain.reader_copy.steps > 0 else ()
    return ("chunk", "spans", *_warm_start(cfg), "reader_mlm", *copies)


def _gain_upstream(cfg: PipelineConfig) -> tuple[str, ...]:
    return ("chunk", "spans", *_warm_start(cfg), "pretrain", "pretrain_null") if cfg.gain.enabled else ()


def _embed_upstream(cfg: PipelineConfig) -> tuple[str, ...]:
    return ("chunk", *(_warm_start(cfg) if cfg.embed.encoder_from == "warm_start" else ()))


def _none(_: PipelineConfig) -> tuple[str, ...]:
    return ()


def _after(*names: str) -> Callable[[PipelineConfig], tuple[str, ...]]:
    return lambda _: names


STAGES: tuple[Stage, ...] = (
    Stage("ingest", "ingest", ("ingest",), _none, _ingest, fans_out=True, flow="ingest-corpus"),
    Stage("chunk", "chunk", ("chunk",), _after("ingest"), _chunk, flow="chunk-blocks"),
    Stage("spans", "salient spans", ("spans",), _after("chunk"), _spans, fans_out=True, flow="mine-salient-spans"),
    Stage("ict", "warm start (ICT)", ("ict",), _after("chunk", "spans"), _ict, flow="warm-start-ict"),
    Stage("retromae", "warm start (RetroMAE)", ("retromae",), _after("chunk"), _retromae, flow="warm-start-retromae"),
    Stage("embed", "embed", ("embed",), _embed_upstream, _embed, fans_out=True, flow="refresh-index"),
    Stage("index", "index", ("index",), _after("embed", "chunk"), _index, flow="refresh-index"),
    Stage("retrieval_eval", "retrieval evaluation", ("retrieval_eval", "embed", "ict"), _after("chunk", "ict"),
          _retrieval_eval, flow="evaluate-retrieval"),
    Stage("reader_mlm", "reader masked-LM warm-up", ("pretrain",), _after("chunk"), _reader_mlm, distributed=True),
    Stage("reader_copy", "reader warm start (copying from a block that holds the span)",
          ("pretrain", "masking", "embed"), _reader_copy_upstream, _reader_copy, distributed=True),
    Stage("pretrain", "pretrain", ("pretrain", "masking", "embed", "index"),
          _pretrain_upstream, _pretrain, distributed=True, flow="pretrain-realm"),
    Stage("pretrain_null", "pretrain, null block only (BERT baseline)", ("pretrain", "masking", "embed", "index"),
          _pretrain_upstream, _pretrain, distributed=True, variant=null_only),
    Stage("realm_gain", "REALM against null-only", ("gain", "pretrain", "masking", "embed", "retrieval_eval", "questions"),
          _gain_upstream, _realm_gain, flow="pretrain-realm"),
    Stage("questions", "questions", ("questions",), _none, _questions),
    # the first phase of fine-tuning: the span reader on each training question's own paragraph
    Stage("gold_reader", "gold-paragraph reader, from the baseline reader", ("finetune",),
          lambda cfg: ("questions", *_reader_start(cfg)), _gold("baseline"), flow="finetune-openqa"),
    Stage("gold_reader_realm", "gold-paragraph reader, from REALM's reader", ("finetune",),
          _after("questions", "pretrain"), _gold("realm"), flow="finetune-openqa"),
    Stage("gold_reader_null", "gold-paragraph reader, from the null-only run's reader", ("finetune",),
          _after("questions", "pretrain_null"), _gold("null"), flow="finetune-openqa"),
    *(Stage(f"finetune_{s.key}", f"fine-tuned {s.name}", ("finetune", "embed"), _qa_upstream(s.key),
            _finetuner(s.key), distributed=True, flow="finetune-openqa")
      for s in SYSTEMS if s.finetuned),
    Stage("openqa_eval", "open-QA evaluation", ("openqa_eval", "finetune", "embed"), _eval_upstream, _openqa_eval,
          flow="evaluate-openqa"),
)
BY_NAME = {s.name: s for s in STAGES}
# what the full pipeline builds; everything upstream of these comes with them
PIPELINE_TARGETS = ("index", "retrieval_eval", "pretrain", "realm_gain", "openqa_eval")


@dataclass(frozen=True)
class StageFlow:
    """A Prefect flow of the stages that name it (`Stage.flow`): what a user reruns from the UI.
    flows/stages.py makes one flow of each, all with the pipeline's parameters (and `dask` where
    `dask`); prefect.yaml deploys each (`python -m flows.deployments`)."""

    name: str                # the flow's (and its deployment's) name
    function: str            # its name in flows/stages.py: the deployment's entrypoint
    description: str         # the run form's text: its first paragraph is the deployment's
    dask: bool = False       # takes `dask` (its stages, or the ingest it resolves first, fan out)
    # the stages it runs (default: the stages that name it); upstream stages resolve through the cache
    wanted: Callable[[PipelineConfig], tuple[str, ...]] | None = None

    def targets(self, cfg: PipelineConfig) -> tuple[str, ...]:
        if self.wanted is not None:
            return self.wanted(cfg)
        return tuple(s.name for s in STAGES if s.flow == self.name)


STAGE_FLOWS: tuple[StageFlow, ...] = (
    StageFlow("ingest-corpus", "ingest_corpus", "Corpora (Wikipedia dumps, SQuAD, DPR, JSONL) -> documents. "
              "`dask` (local:N or a scheduler address) ingests the source files on Dask workers, one task per file.",
              dask=True),
    StageFlow("chunk-blocks", "chunk_blocks", "documents -> blocks of <= chunk.max_wordpieces (288) wordpieces; "
              "ingests first through the cache (`dask` fans that out).", dask=True),
    StageFlow("mine-salient-spans", "mine_salient_spans", "blocks -> salient spans (spaCy NER entities + regex "
              "dates, REALM §3.4). `dask` mines shards of blocks on Dask workers.", dask=True),
    StageFlow("warm-start-ict", "warm_start_ict", "Query and document encoders trained with the Inverse Cloze "
              "Task; a crashed run resumes from its last checkpoint when rerun."),
    StageFlow("warm-start-retromae", "warm_start_retromae", "The retriever's encoder pretrained as a masked "
              "auto-encoder (RetroMAE), the alternative warm start (`pretrain.warm_start=retromae`); resumable."),
    StageFlow("refresh-index", "refresh_index", "Every block embedded with the document encoder "
              "`embed.encoder_from` names (warm_start: the warm-started retriever; latest: the newest retriever "
              "artifact, as the nightly schedule runs it; config: embed.doc_encoder), then a new index version, "
              "switched to atomically.", dask=True),
    StageFlow("evaluate-retrieval", "evaluate_retrieval", "Recall@k and MRR of BM25, the untrained projection, "
              "the ICT retriever and an off-the-shelf reference on SQuAD-open and the DPR NQ sample, same blocks, "
              "same run."),
    StageFlow("pretrain-realm", "pretrain_realm", "Salient-span masked LM over the top-k retrieved blocks plus "
              "the null block, retriever and reader trained jointly; every index refresh is a "
              "`refresh-pretraining-index` subflow. Where the config asks, the reader first learns to copy from a "
              "block that holds the span (`pretrain.reader_copy`), and the null-only run trains beside REALM's and "
              "the two are compared (`gain.enabled`). Rerunning a crashed run resumes from its newest checkpoint."),
    StageFlow("finetune-openqa", "finetune_openqa", "Each system in openqa_eval.systems fine-tuned on "
              "finetune.dataset's train split in two phases, each its own stage: its span reader on each "
              "question's own paragraph (a `gold_reader*` stage per reader start, shared by its systems), then "
              "with its query encoder on its own top-5 blocks for finetune.steps, the document encoder and index "
              "frozen (resumable). `force` recomputes both phases.", wanted=lambda cfg: finetune_targets(cfg)),
    StageFlow("evaluate-openqa", "evaluate_openqa", "Exact match of each system (openqa_eval.systems) on each "
              "dataset's test split, full and answerable subset, with paired intervals; fine-tunes first through "
              "the cache."),
)


def stage(name: str) -> Stage:
    if name not in BY_NAME:
        raise ConfigError(f"stage {name!r}: expected one of {', '.join(BY_NAME)}")
    return BY_NAME[name]


def closure(cfg: PipelineConfig, targets: Iterable[str]) -> list[str]:
    """The targets and every stage upstream of them, in `STAGES` order."""
    needed: set[str] = set()
    todo = list(targets)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += stage(name).upstream(cfg)
    return [s.name for s in STAGES if s.name in needed]


def required_ref(refs: dict[str, ArtifactRef | None], name: str) -> ArtifactRef:
    ref = refs.get(name)
    if ref is None:
        raise ConfigError(f"stage {name!r} produced no artifact in this config, and a stage downstream needs it")
    return ref


def _ref(i: StageInputs, name: str) -> ArtifactRef:
    return required_ref(i.refs, name)


def _mapper(i: StageInputs, name: str) -> Callable[[list[Any]], Any] | None:
    if i.map_jobs is None:
        return None
    from realm_core.ingest.stage import ingest_source
    from realm_core.retrieval.embed import embed_shard
    from realm_core.spans.mining import mine_shard

    jobs_of: dict[str, Callable[[Any], Any]] = {"ingest": ingest_source, "spans": mine_shard, "embed": embed_shard}
    job, map_jobs = jobs_of[name], i.map_jobs
    if name == "embed":  # the embed stage takes every shard's result at once
        return lambda jobs: list(map_jobs(job, jobs))
    return lambda jobs: map_jobs(job, jobs)  # ingest and spans write each result as it comes
