"""Stage flows of open-domain QA (REALM Table 1): `finetune-openqa` fine-tunes each system on
one dataset with the same budget; `evaluate-openqa` answers every dataset's questions with each
system. Both resolve what they need (blocks, ICT, REALM pretraining, questions) through the
cache, so either runs alone from the UI."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.pretrain_realm import pretrain_realm
from flows.settings import resolve
from flows.warm_start import blocks_and_spans, warm_start_for
from realm_core.artifacts import ArtifactRef
from realm_core.config import PipelineConfig
from realm_core.openqa.qa_stage import (
    SYSTEM_KEYS,
    QASystem,
    baseline_reader,
    check_system_keys,
    qa_systems,
)
from tasks.openqa import evaluate_systems, finetune_system, load_questions
from tasks.pretrain import warm_reader
from tasks.retrieval import warm_start_ict


def _systems(keys: list[str], cfg: PipelineConfig, preset: str, root: str, blocks: ArtifactRef | None,
             retriever: ArtifactRef | None, realm_model: ArtifactRef | None
             ) -> tuple[ArtifactRef, ArtifactRef, list[QASystem]]:
    """(blocks, questions, systems): upstream stages through the cache, REALM pretraining as a
    `pretrain-realm` subflow when it is wanted and not given."""
    spans = None
    if blocks is None or ({"ict", "realm"} & set(keys) and retriever is None) or \
            ("realm" in keys and realm_model is None):
        blocks, spans = blocks_and_spans(preset, root, cfg)
    if retriever is None and {"ict", "realm"} & set(keys):
        assert blocks is not None and spans is not None
        retriever = warm_start_ict(blocks, spans, cfg.ict, root)["ref"]
    if realm_model is None and "realm" in keys:
        assert blocks is not None and spans is not None
        start = retriever if cfg.pretrain.warm_start == "ict" else warm_start_for(
            cfg.pretrain.warm_start, blocks, spans, cfg, root)
        realm_model = pretrain_realm(blocks=blocks, spans=spans, retriever=start, config=cfg.pretrain,
                                     masking=cfg.masking, embed=cfg.embed, index=cfg.index,
                                     preset=preset, root=root)["ref"]
    questions: ArtifactRef = load_questions(cfg.questions, root)["ref"]
    warm = warm_reader(blocks, cfg.pretrain, root)  # cached: REALM pretraining starts from it too
    reader = baseline_reader(warm["ref"] if warm is not None else None, cfg.pretrain, cfg.finetune)
    systems = [s for s in qa_systems(retriever, realm_model, cfg.embed, reader) if s.key in keys]
    return blocks, questions, systems


@flow(name="finetune-openqa", log_prints=True)
def finetune_openqa(dataset: str | None = None, systems: list[str] | None = None,
                    preset: str = "demo", config_file: str | None = None,
                    overrides: list[str] | None = None, root: str | None = None,
                    force: bool = False) -> dict[str, Any]:
    """Fine-tune the query encoder and span reader of each system (bm25, ict, realm) on
    `dataset`'s train split (default finetune.dataset), the document encoder and index frozen.
    Cached per system; a crashed run resumes from its newest checkpoint when rerun."""
    cfg, root = resolve(preset, config_file, overrides, root)
    keys = check_system_keys([k for k in (systems or list(SYSTEM_KEYS)) if k != "none"])
    config = cfg.finetune.model_copy(update={"dataset": dataset or cfg.finetune.dataset})
    blocks, questions, chosen = _systems(keys, cfg, preset, root, None, None, None)
    models = {s.key: finetune_system(blocks, questions, s, config, root, force) for s in chosen}
    return {"models": {k: v["ref"] for k, v in models.items()},
            "stages": {f"finetune {k}": v for k, v in models.items()}}


@flow(name="evaluate-openqa", log_prints=True)
def evaluate_openqa(datasets: list[str] | None = None, systems: list[str] | None = None,
                    preset: str = "demo", config_file: str | None = None,
                    overrides: list[str] | None = None, root: str | None = None,
                    blocks: ArtifactRef | None = None, retriever: ArtifactRef | None = None,
                    realm_model: ArtifactRef | None = None) -> dict[str, Any]:
    """Exact match of each system on each dataset's test split (default openqa_eval.datasets;
    full split and answerable subset), recall@k and a predictions table. Fine-tunes each system
    first (cached: a no-op after `finetune-openqa` with the same config)."""
    cfg, root = resolve(preset, config_file, overrides, root)
    keys = check_system_keys(systems or list(SYSTEM_KEYS))
    config = cfg.openqa_eval
    if datasets:
        config = config.model_copy(update={"datasets": tuple(datasets)})
    blocks, questions, chosen = _systems(keys, cfg, preset, root, blocks, retriever, realm_model)
    models = {s.key: finetune_system(blocks, questions, s, cfg.finetune, root)
              for s in chosen if s.retrieval != "none"}
    entries = [(s, models[s.key]["ref"] if s.key in models else None) for s in chosen]
    result = evaluate_systems(blocks, questions, entries, cfg.finetune, config, root)
    return result | {"stages": {f"finetune {k}": v for k, v in models.items()}}
