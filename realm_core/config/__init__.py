"""Stage configs: one frozen pydantic model per stage, and `load_config`, which validates a preset
with its YAML file and `stage.field=value` overrides (read by `tree`) into a PipelineConfig.

Config is plain data, validated at the boundary and printed at the start of every stage. Its hash
(`config_hash`) goes into every artifact's manifest and into the artifact's cache key. The base
class is in `stage`, the training stages' configs in `training`; all are imported from here. The
open-QA systems they name are declared in `realm_core.systems`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from realm_core.config.stage import (
    BUNDLED_ENCODER,
    DEVICE_DEFAULT,
    DEVICE_HELP,
    INT8_HELP,
    PRECISION_HELP,
    StageConfig,
)
from realm_core.config.training import (
    FinetuneConfig,
    GainConfig,
    ICTConfig,
    PretrainConfig,
    ReaderBudget,
    ReaderCopyConfig,
    ReaderMlmConfig,
    RetroMAEConfig,
    SpanReaderConfig,
)
from realm_core.config.tree import config_tree
from realm_core.errors import ConfigError
from realm_core.presets import PRESETS
from realm_core.systems import SYSTEM_KEYS, SYSTEMS

PROJECT_DIR = Path(__file__).resolve().parents[2]

# The stage configs that live in stage_config and training_config are imported from here too.
__all__ = ["BLOCK_VIEWS", "PRECISION_STAGES", "BUNDLED_ENCODER", "DEVICE_DEFAULT", "DEVICE_HELP", "PRECISION_HELP", "PROJECT_DIR", "ChunkConfig",
           "EmbedConfig", "FinetuneConfig", "GainConfig", "ICTConfig", "IndexConfig", "IngestConfig", "MaskingConfig",
           "OpenQAEvalConfig", "PipelineConfig", "PretrainConfig", "QuestionSource", "QuestionsConfig",
            "ReaderBudget", "ReaderCopyConfig", "ReaderMlmConfig", "SpanReaderConfig", "RetrievalEvalConfig", "RetroMAEConfig", "SourceKind", "SourceSpec",
           "SpanConfig",
           "StageConfig", "data_dir", "load_config", "resolve_data_path", "work_dir"]


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

    # max_record_bytes refuses an input, never changes what an accepted one produces: not hashed
    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"workers", "chunk_pages", "bz2_threads",
                                                            "max_record_bytes"})

    sources: tuple[SourceSpec, ...] = Field(min_length=1)
    max_record_bytes: int = Field(64 << 20, ge=1024, description=(
        "largest <page> of a dump (decompressed XML) or JSONL line read; a larger one is refused "
        "with its position, so that a small compressed file cannot claim unbounded memory"))
    workers: int = Field(2, ge=1, description="processes cleaning wikitext")
    chunk_pages: int = Field(16, ge=1, description="pages sent to a worker at a time")
    bz2_threads: int = Field(1, ge=1, description="threads decompressing a .bz2 dump")
    rows_per_file: int = Field(20_000, ge=1, description="documents per Parquet part file")


class ChunkConfig(StageConfig):
    """Documents to REALM blocks `[CLS] title [SEP] body [SEP]`."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_documents"})
    # keyed by its tokenizer files' content instead (run_chunk's inputs)
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset({"encoder"})

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

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_size", "shard_size", "workers", "device",
                                                            "tokenizer_parallel"})
    # The stages hash the encoder's weights (`encoder_hash`); its path is often an artifact's.
    # `encoder_from` only says which encoder the index stage resolves to `doc_encoder`: embeddings
    # of one encoder are one artifact however it was named (the pipeline's index, the retrieval
    # evaluation's and REALM's first index share them).
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset({"doc_encoder", "encoder_from"})

    doc_encoder: str = Field(BUNDLED_ENCODER, description="retriever dir, bundled name or HF BERT dir")
    encoder_from: Literal["warm_start", "latest", "config"] = Field(
        "warm_start", description="the index's document encoder: the warm start `pretrain.warm_start` "
        "names (REALM §3.4; `doc_encoder` when it is none), the newest retriever artifact in the "
        "store (the nightly re-index; `doc_encoder` when there is none), or `doc_encoder` itself")
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
    precision: Literal["fp32", "bf16", "auto", "int8"] = Field("fp32", description=PRECISION_HELP + INT8_HELP)
    tokenizer_parallel: Literal["auto", "on", "off"] = Field(
        "auto", description="the fast tokeniser's own thread pool (TOKENIZERS_PARALLELISM) while it "
        "tokenises a shard: auto is on for a GPU, where one tokeniser thread starves the encoder "
        "(bench/gpu.py), and leaves the environment's setting on a CPU")


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
    reference_rows: bool = Field(True, description="also the untrained projection and off-the-shelf MiniLM "
                                 "mean pooling (each embeds the corpus once more; bench/retrieval.py always has them)")


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


class OpenQAEvalConfig(StageConfig):
    """Open-QA evaluation (REALM Table 1): exact match, full split and answerable subset."""

    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_size", "reader_tokens"})
    HASHED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"precision"})

    datasets: tuple[str, ...] = ("nq", "wq", "ct", "squad-open")
    systems: tuple[str, ...] = Field(
        tuple(k.key for k in SYSTEMS if k.default_row), description="Table 1 rows, any of: " + "; ".join(
            f"{k.key} ({k.name})" for k in SYSTEMS) + ". Those built from REALM pretraining are left out when "
        "pretrain.retrieval is null_only")

    @field_validator("systems")
    @classmethod
    def _known_systems(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [k for k in value if k not in SYSTEM_KEYS]
        if unknown:
            raise ValueError(f"system {unknown[0]!r}: expected one of {', '.join(SYSTEM_KEYS)}")
        return value

    split: Literal["train", "dev", "test"] = "test"
    question_limits: dict[str, int] = Field(
        default_factory=dict, description="dataset -> first N questions evaluated (all if absent)")
    answer_candidates: int = Field(20, ge=1, description="top spans whose probabilities are summed "
                                   "per normalised answer string")
    batch_size: int = Field(32, ge=1, description="questions retrieved and read together (also by `realm ask "
                            "--questions` and the service); their top-k rows are read in length order")
    reader_tokens: int = Field(12_288, ge=1, description=(
        "padded wordpieces per reader forward: a batch's rows are read longest first in chunks of this "
        "size, each padded to its own longest row (bench/ask.py measures what it gains)"))
    temperatures: tuple[float, ...] = Field(
        (0.5, 1.0, 2.0, 4.0, 8.0), description="retrieval temperatures tried on dev per system "
        "(uniform p(z|x) is always tried too); the best by dev exact match is used on test")
    forms: tuple[Literal["joint", "per_block"], ...] = Field(
        ("joint", "per_block"), description="marginal forms tried on dev with every temperature (the reader "
        "runs once); the best pair by dev exact match answers the test questions")
    calibration_questions: int = Field(300, ge=1, description="dev questions form and temperature are fit on")
    bootstrap_resamples: int = Field(10_000, ge=100, description="paired-difference intervals")
    precision: Literal["as_trained", "int8"] = Field(
        "as_trained", description="the readers' forwards: as_trained (finetune.precision), or int8" + INT8_HELP)


class QueryConfig(StageConfig):
    """The query side (`realm search`, `realm ask`): limits a query is checked against."""

    max_query_chars: int = Field(1_000, ge=1, description="longest query or question accepted")
    max_k: int = Field(100, ge=1, description="most blocks a search may return")
    snippet_chars: int = Field(240, ge=20, description="characters of block text shown per hit")
    precision: Literal["fp32", "bf16", "auto", "int8"] = Field(
        "fp32", description="the served reader's forwards (and the query encoder's with int8): "
        + PRECISION_HELP + INT8_HELP)
    max_add_bytes: int = Field(256 * 2**20, ge=1, description=(
        "largest POST /documents body `realm serve-qa --allow-add` reads (more is a 413: send it in parts)"))
    max_document_chars: int = Field(2_000_000, ge=1, description=(
        "longest document text a POST /documents takes (a longer one is a 413; `realm add` reads any)"))


# Every stage that reads a block, and the field of its config that sets how many wordpieces it
# reads: `block_length` fills each one a preset, YAML file or override leaves unset.
BLOCK_VIEWS: dict[str, str] = {"chunk": "max_wordpieces", "embed": "max_length", "ict": "block_length",
                               "retromae": "block_length", "pretrain": "doc_length"}
# the stages whose encoders run in a `precision` (the query side too); the pipeline's `precision`
# fills the ones left unset
PRECISION_STAGES: tuple[str, ...] = ("embed", "ict", "retromae", "pretrain", "finetune", "query")


class PipelineConfig(StageConfig):
    """Every stage's config; a preset fills it, YAML and overrides adjust it."""

    preset: str
    block_length: int = Field(288, ge=16, description=(
        "wordpieces of a block ([CLS] title [SEP] body [SEP]; REALM §3.4: 288), the one view every "
        "stage that reads blocks takes unless its own field is set: " + ", ".join(
            f"{s}.{f}" for s, f in BLOCK_VIEWS.items())))
    precision: Literal["fp32", "bf16", "auto"] = Field("fp32", description=(
        PRECISION_HELP + "; the precision of every stage whose own field is not set: "
        + ", ".join(f"{s}.precision" for s in PRECISION_STAGES)))
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
    gain: GainConfig = GainConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    openqa_eval: OpenQAEvalConfig = OpenQAEvalConfig()
    query: QueryConfig = QueryConfig()

    @model_validator(mode="before")
    @classmethod
    def _one_view_of_a_block(cls, data: Any) -> Any:
        """Fill each stage's block view the input leaves unset with `block_length`, and each
        stage's precision with `precision`; a value a stage section sets itself stays (and is
        recorded in that stage's config and manifest)."""
        if not isinstance(data, dict):
            return data
        length = data.get("block_length", cls.model_fields["block_length"].default)
        precision = data.get("precision", cls.model_fields["precision"].default)
        out = dict(data)
        fills = [(section, name, length) for section, name in BLOCK_VIEWS.items()]
        fills += [(section, "precision", precision) for section in PRECISION_STAGES]
        for section, name, default in fills:
            value = out.get(section)
            if value is None:
                out[section] = {name: default}
            elif isinstance(value, dict):
                out[section] = value if name in value else {**value, name: default}
            elif isinstance(value, StageConfig) and name not in value.model_fields_set:
                out[section] = value.model_copy(update={name: default})
        return out

    @model_validator(mode="after")
    def _readers_hold_a_query_and_a_block(self) -> PipelineConfig:
        """A reader row `[CLS] query [SEP] title [SEP] body [SEP]` must hold its query and at least
        one wordpiece of a block's body, or every row would read nothing: refused before any step.
        REALM's pretraining reader reads the whole block (query + block - 1 wordpieces: the
        block's [CLS] is the row's)."""
        f = self.finetune
        if f.reader_length < f.min_reader_length:
            raise ValueError(f"finetune.reader_length={f.reader_length} cannot hold a finetune.question_length="
                             f"{f.question_length} query and one wordpiece of a block (it needs at least "
                             f"{f.min_reader_length})")
        p, whole = self.pretrain, self.masking.query_length + self.chunk.max_wordpieces - 1
        if p.reader_length < whole:
            raise ValueError(f"pretrain.reader_length={p.reader_length} cuts blocks: a masking.query_length="
                             f"{self.masking.query_length} query and a whole chunk.max_wordpieces="
                             f"{self.chunk.max_wordpieces} block need {whole} (the reader reads whole blocks)")
        return self

    def block_views(self) -> dict[str, int]:
        """`stage.field` -> the wordpieces of a block that stage reads (differing views are
        a choice a preset makes for cost, and README says which)."""
        return {f"{s}.{f}": getattr(getattr(self, s), f) for s, f in BLOCK_VIEWS.items()}


def load_config(preset: str = "demo", yaml_path: str | Path | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> PipelineConfig:
    """Preset, then a YAML file, then `stage.field=value` overrides (values parsed as YAML)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    tree = config_tree({"preset": preset, **json.loads(json.dumps(PRESETS[preset]))}, yaml_path, overrides,
                       str(yaml_path) if yaml_path is not None else f"preset {preset!r} with --set")
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
