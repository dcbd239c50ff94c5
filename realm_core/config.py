"""Stage configs: one frozen pydantic model per stage, presets, YAML and `stage.field=value` overrides.

Config is plain data, validated at the boundary and printed at the start of every stage. Its hash
(`config_hash`) goes into every artifact's manifest and into the artifact's cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from realm_core.errors import ConfigError
from realm_core.presets import PRESETS

PROJECT_DIR = Path(__file__).resolve().parents[1]
BUNDLED_ENCODER = "bundled:all-MiniLM-L6-v2"


DEVICE_DEFAULT = "auto"
DEVICE_HELP = ("auto: this process's GPU (its torchrun local rank) where CUDA is available, else "
               "the CPU; or cpu, cuda, cuda:N")
PRECISION_HELP = "bf16: autocast matrix products to bfloat16 (GPUs; weights stay fp32)"


class StageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Fields that change how fast a stage runs but never what it produces; left out of the hash
    # so that rerunning with more workers is still a cache hit.
    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset()

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of this config (field order independent)."""
        data = self.model_dump(mode="json", exclude=set(self.EXECUTION_FIELDS))
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


SourceKind = Literal["wikipedia", "squad", "dpr_json", "dpr_tsv", "jsonl"]


class SourceSpec(StageConfig):
    """One corpus file. `path` may start with `data:` to mean $REALM_DATA_DIR."""

    kind: SourceKind
    path: str
    name: str | None = Field(None, description="prefix of doc ids; defaults to the kind")
    max_documents: int | None = Field(None, ge=1, description="keep only the first N documents")

    @property
    def source_name(self) -> str:
        return self.name or self.kind


class IngestConfig(StageConfig):
    """Corpora to documents."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"workers", "chunk_pages", "bz2_threads"})

    sources: tuple[SourceSpec, ...] = Field(min_length=1)
    workers: int = Field(2, ge=1, description="processes cleaning wikitext")
    chunk_pages: int = Field(16, ge=1, description="pages sent to a worker at a time")
    bz2_threads: int = Field(1, ge=1, description="threads decompressing a .bz2 dump")
    rows_per_file: int = Field(20_000, ge=1, description="documents per Parquet part file")


class ChunkConfig(StageConfig):
    """Documents to REALM blocks `[CLS] title [SEP] body [SEP]`."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_documents"})

    encoder: str = Field(BUNDLED_ENCODER, description="tokenizer source: bundled name or HF dir")
    max_wordpieces: int = Field(288, ge=16, description="REALM §3.4: blocks of up to 288 wordpieces")
    batch_documents: int = Field(256, ge=1)


class SpanConfig(StageConfig):
    """Salient span mining (REALM §3.4): spaCy NER entities plus regex dates."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"n_process", "batch_size", "shard_size"})

    spacy_model: str = Field("en_core_web_sm", description="only its 'ner' pipe is enabled")
    entity_labels: tuple[str, ...] = Field(
        ("PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW",
         "LANGUAGE"), description="spaCy labels kept as named entities; dates come from regexes")
    n_process: int = Field(2, ge=1, description="spaCy worker processes")
    batch_size: int = Field(64, ge=1, description="texts per spaCy batch")
    shard_size: int = Field(20_000, ge=1, description="blocks per job when fanned out over Dask workers")


class MaskingConfig(StageConfig):
    """How pretraining examples are masked (REALM Table 2 ablations)."""

    strategy: Literal["salient_span", "random_token", "random_span"] = "salient_span"
    query_length: int = Field(96, ge=8, description="[CLS] sentence [SEP] in wordpieces")
    max_mask_tokens: int = Field(10, ge=1, description="salient spans longer than this are skipped")
    mask_rate: float = Field(0.15, gt=0, lt=1, description="random token/span masking rate")
    span_geometric_p: float = Field(0.2, gt=0, le=1, description="SpanBERT span length ~ Geo(p)")
    seed: int = 0


class EmbedConfig(StageConfig):
    """Block embeddings with the document (knowledge) encoder (REALM §3.1)."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_size", "shard_size", "workers", "device"})

    doc_encoder: str = Field(BUNDLED_ENCODER, description="retriever dir, bundled name or HF BERT dir")
    projection_dim: int = Field(128, ge=0, description="used when the encoder has no saved head; "
                                "0: no head, the pooled hidden state itself")
    pooling: Literal["cls", "mean"] = "cls"
    normalize: bool = Field(False, description="L2-normalise (only for an encoder without saved head)")
    seed: int = Field(0, description="seed of a fresh projection head")
    max_length: int = Field(288, ge=8, description="block tokens, specials included")
    batch_size: int = Field(32, ge=1)
    shard_size: int = Field(50_000, ge=1, description="blocks per embeddings shard file")
    float16: bool = Field(False, description="store embeddings as float16")
    workers: int = Field(1, ge=1, description="processes embedding shards in parallel, each with "
                         "cores/workers threads (pays off with many shards and cores)")
    device: str = Field(DEVICE_DEFAULT, description=DEVICE_HELP)
    precision: Literal["fp32", "bf16"] = Field("fp32", description=PRECISION_HELP)


class IndexConfig(StageConfig):
    """The MIPS index over block embeddings; versioned by the retriever step."""

    factory: str = Field("Flat", description="faiss factory string: Flat, IVF4096,Flat, HNSW32")
    ivf_nprobe: int = Field(16, ge=1)
    hnsw_ef_search: int = Field(64, ge=1)
    train_sample: int = Field(200_000, ge=1, description="vectors an IVF index is trained on")


class RetrievalEvalConfig(StageConfig):
    """Retrieval evaluation (recall@k with DPR's has_answer rule, MRR) on two question sets."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_size"})

    squad_path: str = Field("data:squad/squad-v1.1-dev.articles-00-39.json",
                            description="SQuAD JSON; its articles are also in the corpus")
    squad_articles: tuple[int, int] = Field((30, 39), description="first and last article (inclusive)")
    squad_source: str = Field("squad", description="corpus source name of the SQuAD documents")
    dpr_path: str | None = Field("data:dpr/haystack-dpr-nq-dev-sample.json",
                                 description="DPR retriever JSON; None skips it")
    dpr_source: str = Field("dpr", description="its passages: blocks of this corpus source")
    ks: tuple[int, ...] = (1, 5, 20)
    depth: int = Field(100, ge=1, description="ranked blocks kept per question; MRR@depth")
    query_length: int = Field(64, ge=8)
    batch_size: int = Field(64, ge=1)


QuestionKind = Literal["nq_open", "dpr_topics", "webquestions", "curatedtrec", "squad"]


class QuestionSource(StageConfig):
    """One open-QA question file and the split it provides."""

    kind: QuestionKind
    path: str
    dataset: str = Field(description="table name: nq, wq, ct, squad-open, ...")
    split: Literal["train", "dev", "test"]
    articles: tuple[int, int] | None = Field(None, description="squad only: first and last article")


def _openqa_sources() -> tuple[QuestionSource, ...]:
    squad = "data:squad/squad-v1.1-dev.articles-00-39.json"
    return tuple(QuestionSource(**s) for s in (
        {"kind": "nq_open", "path": "data:openqa/NQ-open.dev.jsonl", "dataset": "nq", "split": "test"},
        {"kind": "webquestions", "path": "data:openqa/webquestions/test.json", "dataset": "wq", "split": "test"},
        {"kind": "curatedtrec", "path": "data:openqa/curatedtrec/large2470-test.tsv", "dataset": "ct",
         "split": "test"},
        {"kind": "squad", "path": squad, "dataset": "squad-open", "split": "train", "articles": (0, 29)},
        {"kind": "squad", "path": squad, "dataset": "squad-open", "split": "dev", "articles": (30, 34)},
        {"kind": "squad", "path": squad, "dataset": "squad-open", "split": "test", "articles": (35, 39)},
    ))


class QuestionsConfig(StageConfig):
    """Open-QA questions of every benchmark into one `questions` artifact (REALM Table 1)."""

    sources: tuple[QuestionSource, ...] = Field(default_factory=_openqa_sources)


class ICTConfig(StageConfig):
    """Inverse Cloze Task warm start of the retriever (ORQA; REALM §3.4)."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every"})

    encoder: str = Field(BUNDLED_ENCODER, description="BERT both encoders start from")
    projection_dim: int = Field(128, ge=1)
    pooling: Literal["cls", "mean"] = "cls"
    batch_size: int = Field(4096, ge=2, description="examples per step; the others are in-batch negatives")
    learning_rate: float = Field(1e-4, gt=0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1, description="BERT hidden+attention dropout while training")
    steps: int = Field(100_000, ge=1)
    keep_sentence_prob: float = Field(0.1, ge=0, le=1, description="ORQA: keep the query in 10%")
    min_sentence_chars: int = Field(20, ge=1, description="shorter sentences are not used as queries")
    query_length: int = Field(64, ge=8)
    block_length: int = Field(288, ge=16)
    checkpoint_every: int = Field(50, ge=1, description="steps between resumable checkpoints")
    log_every: int = Field(10, ge=1)
    seed: int = 0


class RetroMAEConfig(StageConfig):
    """RetroMAE warm start (Xiao et al. 2022): masked auto-encoding through a [CLS] bottleneck."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every"})

    encoder: str = Field(BUNDLED_ENCODER, description="BERT the encoder starts from")
    projection_dim: int = Field(0, ge=0, description="0: the [CLS] state itself (RetroMAE's embedding)")
    encoder_mask_rate: float = Field(0.3, ge=0.0, le=0.9, description="RetroMAE: 15-30%")
    decoder_mask_rate: float = Field(0.5, ge=0.0, le=0.95, description="RetroMAE: 50-70%")
    enhanced_decoding: bool = Field(True, description="two streams + per-row attention mask; "
                                    "false: one masked stream (the ablation)")
    batch_size: int = Field(256, ge=1)
    block_length: int = Field(288, ge=16)
    learning_rate: float = Field(1e-4, gt=0)
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    steps: int = Field(100_000, ge=1)
    checkpoint_every: int = Field(50, ge=1)
    log_every: int = Field(10, ge=1)
    seed: int = 0


class PretrainConfig(StageConfig):
    """REALM pretraining (Guu et al. 2020 §3-§4). The masked queries come from `masking`."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})

    warm_start: Literal["ict", "retromae", "none"] = Field(
        "ict", description="initial query/document encoders: a warm-start artifact, or fresh heads")
    reader_encoder: str = Field(BUNDLED_ENCODER, description="BERT the knowledge-augmented encoder starts from")
    retrieval: Literal["realm", "null_only"] = Field(
        "realm", description="null_only: the null block alone, i.e. BERT-style MLM (Table 2 baseline)")
    freeze_retriever: bool = Field(False, description="Table 2 ablation: no gradient into either encoder")
    relevance: Literal["recompute", "index"] = Field(
        "recompute", description="recompute: retrieved blocks re-embedded by the current document "
        "encoder (gradients reach it); index: their stale index vectors (only the query encoder "
        "and the null block's embedding learn; a step costs far less)")
    top_k: int = Field(8, ge=1, description="blocks per example, the null block included")
    reader_length: int = Field(384, ge=16, description="[CLS] x [SEP] title [SEP] body [SEP]")
    doc_length: int = Field(288, ge=8, description="block tokens when relevance is recomputed")
    batch_size: int = Field(512, ge=1, description="examples per optimizer step")
    grad_accumulation: int = Field(1, ge=1, description="micro-batches per step (batch_size each / this)")
    learning_rate: float = Field(3e-5, gt=0)
    retriever_lr_scale: float = Field(
        1.0, gt=0, description="the encoders' learning rate as a multiple of learning_rate (the "
        "paper: 1). Below 1 on short runs, where the reader has not yet learned to use retrieval "
        "and the retriever's gradient is mostly noise that erodes the warm start")
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    steps: int = Field(200_000, ge=1)
    warmup_steps: int = Field(10_000, ge=0)
    refresh_every: int = Field(500, ge=1, description="steps between index refreshes (x30: Table 2's stale index)")
    sync_refresh: bool = Field(False, description="wait for each refresh (deterministic; tests)")
    exclusion: Literal["block", "article"] = Field(
        "block", description="trivial retrievals dropped: the query's own block and its article's "
        "copies in other corpora (REALM §3.4), or every block of its article")
    exclusion_margin: int = Field(16, ge=0, description="extra index hits fetched to replace trivial ones")
    heldout_every: int = Field(50, ge=2, description="articles with hash % N == 0 are held out for eval")
    eval_every: int = Field(1000, ge=1)
    eval_examples: int = Field(256, ge=1)
    checkpoint_every: int = Field(1000, ge=1)
    log_every: int = Field(10, ge=1)
    seed: int = 0
    device: str = Field(DEVICE_DEFAULT, description=DEVICE_HELP)
    precision: Literal["fp32", "bf16"] = Field("fp32", description=PRECISION_HELP)


class FinetuneConfig(StageConfig):
    """Open-QA fine-tuning (REALM §3.4): the document encoder and its index frozen, the query
    encoder and the span reader trained to maximise p(y|x) over the top-k retrieved blocks."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"checkpoint_every", "log_every", "device"})

    dataset: str = Field("squad-open", description="questions table dataset to train on")
    split: Literal["train", "dev", "test"] = "train"
    top_k: int = Field(5, ge=1, description="retrieved blocks per question (REALM: 5)")
    reader_length: int = Field(384, ge=32, description="[CLS] question [SEP] title [SEP] body [SEP]")
    question_length: int = Field(64, ge=8)
    max_span_length: int = Field(10, ge=1, description="answer spans up to this many wordpieces")
    batch_size: int = Field(16, ge=1, description="questions per step, each with a gold span retrieved")
    draw_factor: int = Field(4, ge=1, description="questions drawn per batch slot; those whose "
                             "retrieved blocks hold no answer teach nothing and are skipped")
    learning_rate: float = Field(1e-5, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    dropout: float = Field(0.1, ge=0, lt=1)
    steps: int = Field(2_000, ge=1)
    train_query_encoder: bool = Field(True, description="False: the retriever stays as warm-started")
    checkpoint_every: int = Field(100, ge=1)
    log_every: int = Field(10, ge=1)
    seed: int = 0
    device: str = Field(DEVICE_DEFAULT, description=DEVICE_HELP)
    precision: Literal["fp32", "bf16"] = Field("fp32", description=PRECISION_HELP)


class OpenQAEvalConfig(StageConfig):
    """Open-QA evaluation (REALM Table 1): exact match, full split and answerable subset."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_size"})

    datasets: tuple[str, ...] = ("nq", "wq", "ct", "squad-open")
    split: Literal["train", "dev", "test"] = "test"
    question_limits: dict[str, int] = Field(
        default_factory=dict, description="dataset -> first N questions evaluated (all if absent)")
    answer_candidates: int = Field(20, ge=1, description="top spans whose probabilities are summed "
                                   "per normalised answer string")
    batch_size: int = Field(8, ge=1, description="questions per reader forward")


class PipelineConfig(StageConfig):
    """Every stage's config; a preset fills it, YAML and overrides adjust it."""

    preset: str
    ingest: IngestConfig
    chunk: ChunkConfig = ChunkConfig()
    spans: SpanConfig = SpanConfig()
    masking: MaskingConfig = MaskingConfig()
    embed: EmbedConfig = EmbedConfig()
    index: IndexConfig = IndexConfig()
    retrieval_eval: RetrievalEvalConfig = RetrievalEvalConfig()
    questions: QuestionsConfig = QuestionsConfig()
    ict: ICTConfig = ICTConfig()
    retromae: RetroMAEConfig = RetroMAEConfig()
    pretrain: PretrainConfig = PretrainConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    openqa_eval: OpenQAEvalConfig = OpenQAEvalConfig()


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        child = node.setdefault(k, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        node = child
    node[keys[-1]] = value


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(preset: str = "demo", yaml_path: str | Path | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> PipelineConfig:
    """Preset, then a YAML file, then `stage.field=value` overrides (values parsed as YAML)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    tree: dict[str, Any] = {"preset": preset, **json.loads(json.dumps(PRESETS[preset]))}
    if yaml_path is not None:
        try:
            loaded = yaml.safe_load(Path(yaml_path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{yaml_path}: cannot read YAML config: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"{yaml_path}: expected a mapping of stage sections")
        tree = _deep_merge(tree, loaded)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected stage.field=value")
        key, raw = item.split("=", 1)
        _set_path(tree, key.strip(), yaml.safe_load(raw))
    try:
        return PipelineConfig.model_validate(tree)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration (preset {preset!r}):\n{e}") from e


def data_dir() -> Path:
    """Where the bundled real data lives: $REALM_DATA_DIR, default ../shared/data."""
    return Path(os.environ.get("REALM_DATA_DIR", PROJECT_DIR.parent / "shared" / "data")).resolve()


def work_dir() -> Path:
    """Artifacts, Prefect home and logs: $REALM_WORK_DIR, default <project>/work."""
    return Path(os.environ.get("REALM_WORK_DIR", PROJECT_DIR / "work")).resolve()


def resolve_data_path(path: str) -> Path:
    if path.startswith("data:"):
        return data_dir() / path[len("data:"):]
    return Path(path).expanduser().resolve()
