"""Thin tasks over the open-QA stages: questions, fine-tuning, evaluation."""

from __future__ import annotations

from typing import Any

from prefect import task

from realm_core.artifacts import ArtifactRef, ArtifactStore
from realm_core.config import FinetuneConfig, OpenQAEvalConfig, QuestionsConfig
from realm_core.openqa.evaluation import run_evaluate_openqa
from realm_core.openqa.qa_stage import QASystem, run_finetune
from realm_core.openqa.stage import run_load_questions
from tasks.reporting import run_stage


@task(name="load-questions")
def load_questions(config: QuestionsConfig, root: str) -> dict[str, Any]:
    return run_stage("questions", lambda _: run_load_questions(ArtifactStore(root), config))


@task(name="finetune-system", task_run_name="finetune-{system.key}")
def finetune_system(blocks: ArtifactRef, questions: ArtifactRef, system: QASystem, config: FinetuneConfig,
                    root: str, force: bool = False) -> dict[str, Any]:
    return run_stage(f"finetune {system.key} on {config.dataset}", lambda p: run_finetune(
        ArtifactStore(root), blocks, questions, system, config, p, force))


@task(name="evaluate-systems")
def evaluate_systems(blocks: ArtifactRef, questions: ArtifactRef,
                     entries: list[tuple[QASystem, ArtifactRef | None]], finetune: FinetuneConfig,
                     config: OpenQAEvalConfig, root: str) -> dict[str, Any]:
    return run_stage("open-QA evaluation", lambda p: run_evaluate_openqa(
        ArtifactStore(root), blocks, questions, entries, finetune, config, p))
