"""The stage flows: one Prefect flow per stage of the graph (realm_core/graph.py), each taking
the same parameters as `realm/full-pipeline` (preset, config_file, overrides, root, force, plus
dask where the stage fans out), so rerunning one stage from the UI resolves the preset with
the overrides typed into its form, exactly as the command line does. Each flow resolves its
upstream stages through the cache (a task per stage, a cache hit when it exists) and returns
every stage it resolved."""

from __future__ import annotations

from prefect import flow

from flows.fanout import dask_hook
from flows.settings import ConfigFile, Dask, Force, Overrides, Preset, Root, described, resolve
from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import EmbedConfig, IndexConfig
from realm_core.graph import Resolver, StageRun
from tasks.retrieval import build_index, embed_blocks
from tasks.stages import prefect_hook


def run_stages(targets: tuple[str, ...], preset: str, config_file: str | None, overrides: list[str] | None,
               root: str | None, force: bool, dask: str | None = None) -> dict[str, StageRun]:
    """Resolve `targets` (and what they need) with each stage a task of the calling flow;
    `force` recomputes the targets, never their upstream."""
    cfg, root = resolve(preset, config_file, overrides, root)
    resolver = Resolver(cfg, ArtifactStore(root), hook=dask_hook(dask, prefect_hook),
                        force=targets if force else ())

    def refresh(embed: EmbedConfig, index_root: str) -> None:
        refresh_pretraining_index(resolver.ref("chunk"), embed, cfg.index, root, index_root)

    resolver.refresh_index = refresh
    for name in targets:
        resolver.run(name)
    return resolver.runs


@flow(name="refresh-pretraining-index", log_prints=True)
def refresh_pretraining_index(blocks: ArtifactRef, embed: EmbedConfig, index: IndexConfig, root: str,
                              index_root: str) -> None:
    """A pretraining run's index refresh (REALM §3.4): every block re-embedded with the run's
    current document encoder, the new version built under the run's own index root."""
    embedded = embed_blocks(blocks, embed, root)
    assert embedded.ref is not None
    build_index(embedded.ref, blocks, index, root, index_root)


@flow(name="ingest-corpus", log_prints=True)
@described
def ingest_corpus(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                  root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, StageRun]:
    """Corpora (Wikipedia dumps, SQuAD, DPR, JSONL) -> documents. `dask` (local:N or a
    scheduler address) ingests the source files on Dask workers, one task per file."""
    return run_stages(("ingest",), preset, config_file, overrides, root, force, dask)


@flow(name="chunk-blocks", log_prints=True)
@described
def chunk_blocks(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                 root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, StageRun]:
    """documents -> blocks of <= chunk.max_wordpieces (288) wordpieces; ingests first through
    the cache (`dask` fans that out)."""
    return run_stages(("chunk",), preset, config_file, overrides, root, force, dask)


@flow(name="mine-salient-spans", log_prints=True)
@described
def mine_salient_spans(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                       root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, StageRun]:
    """blocks -> salient spans (spaCy NER entities + regex dates, REALM §3.4). `dask` mines
    shards of blocks on Dask workers."""
    return run_stages(("spans",), preset, config_file, overrides, root, force, dask)


@flow(name="warm-start-ict", log_prints=True)
@described
def warm_start_ict(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                   root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """Query and document encoders trained with the Inverse Cloze Task; a crashed run resumes
    from its last checkpoint when rerun."""
    return run_stages(("ict",), preset, config_file, overrides, root, force)


@flow(name="warm-start-retromae", log_prints=True)
@described
def warm_start_retromae(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                        root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """The retriever's encoder pretrained as a masked auto-encoder (RetroMAE), the alternative
    warm start (`pretrain.warm_start=retromae`); resumable."""
    return run_stages(("retromae",), preset, config_file, overrides, root, force)


@flow(name="refresh-index", log_prints=True)
@described
def refresh_index(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                  root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, StageRun]:
    """Every block embedded with the document encoder `embed.encoder_from` names (warm_start:
    the warm-started retriever; latest: the newest retriever artifact, as the nightly schedule
    runs it; config: embed.doc_encoder), then a new index version, switched to atomically."""
    return run_stages(("embed", "index"), preset, config_file, overrides, root, force, dask)


@flow(name="evaluate-retrieval", log_prints=True)
@described
def evaluate_retrieval(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                       root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """Recall@k and MRR of BM25, the untrained projection, the ICT retriever and an off-the-shelf
    reference on SQuAD-open and the DPR NQ sample, same blocks, same run."""
    return run_stages(("retrieval_eval",), preset, config_file, overrides, root, force)


@flow(name="pretrain-realm", log_prints=True)
@described
def pretrain_realm(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                   root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """Salient-span masked LM over the top-k retrieved blocks plus the null block, retriever and
    reader trained jointly; every index refresh is a `refresh-pretraining-index` subflow. Where
    the config asks, the reader first learns to copy from a block that holds the span
    (`pretrain.reader_copy`), and the null-only run trains beside REALM's and the two are compared
    (`gain.enabled`). Rerunning a crashed run resumes from its newest checkpoint."""
    return run_stages(("pretrain", "realm_gain"), preset, config_file, overrides, root, force)


@flow(name="finetune-openqa", log_prints=True)
@described
def finetune_openqa(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                    root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """Each system in openqa_eval.systems fine-tuned on finetune.dataset's train split in two
    phases, each its own stage: its span reader on each question's own paragraph (a
    `gold_reader*` stage per reader start, shared by its systems), then with its query encoder on
    its own top-5 blocks for finetune.steps, the document encoder and index frozen (resumable).
    `force` recomputes both phases."""
    from realm_core.graph import finetune_targets

    cfg, _ = resolve(preset, config_file, overrides, root)
    return run_stages(finetune_targets(cfg), preset, config_file, overrides, root, force)


@flow(name="evaluate-openqa", log_prints=True)
@described
def evaluate_openqa(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                    root: Root = None, force: Force = False) -> dict[str, StageRun]:
    """Exact match of each system (openqa_eval.systems) on each dataset's test split, full and
    answerable subset, with paired intervals; fine-tunes first through the cache."""
    return run_stages(("openqa_eval",), preset, config_file, overrides, root, force)
