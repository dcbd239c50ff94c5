"""The questions stage: every open-QA benchmark file into one `questions` artifact, with what
each reader dropped (and why) in the manifest and the stage report."""

from __future__ import annotations

from typing import Any

from realm_core.config import QuestionsConfig, QuestionSource, resolve_data_path
from realm_core.errors import ConfigError, check_input_file
from realm_core.questions import (
    QuestionSet,
    curated_trec,
    dpr_topics,
    nq_open,
    squad_questions,
    web_questions,
)
from realm_core.store.artifacts import ArtifactStore, StageResult, sha256_file
from realm_core.store.cache import CachedStage, code_version

KIND = "questions"


def read_source(source: QuestionSource) -> QuestionSet:
    path = resolve_data_path(source.path)
    if source.kind == "squad":
        if source.articles is None:
            raise ConfigError(f"{source.path}: a squad question source needs `articles` (first, last)")
        return squad_questions(path, source.articles, source.dataset)
    reader = {"nq_open": nq_open, "dpr_topics": dpr_topics, "webquestions": web_questions,
              "curatedtrec": curated_trec}[source.kind]
    return reader(path, source.dataset)


def run_load_questions(store: ArtifactStore, config: QuestionsConfig) -> StageResult:
    inputs: dict[str, str] = {}
    for i, s in enumerate(config.sources):
        path = resolve_data_path(s.path)
        check_input_file(path, f"a {s.kind} question file ({s.dataset}/{s.split})")
        inputs[f"{s.dataset}/{s.split}/{i}"] = sha256_file(path)
    inputs["code"] = code_version((__name__,))
    cache = CachedStage(store, KIND, config, inputs)
    if cache.hit:
        return cache.hit
    rows: list[dict[str, Any]] = []
    stats: dict[str, Any] = {}
    lines = ["| dataset | split | questions | dropped |", "|---|---|---:|---|"]
    for source in config.sources:
        qs = read_source(source)
        rows += [{"dataset": source.dataset, "split": source.split, "qid": q.qid, "question": q.question,
                  "answers": list(q.answers), "match": q.match, "title": q.title, "context": q.context}
                 for q in qs.questions]
        stats[f"{source.dataset}/{source.split}"] = len(qs.questions)
        counted = {reason: n for reason, n in qs.dropped.items() if n}
        if counted:
            stats[f"{source.dataset}/{source.split} dropped"] = counted
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(counted.items())) or "none"
        lines.append(f"| {source.dataset} | {source.split} | {len(qs.questions):,} | {dropped} |")
    report = "\n".join(lines)
    with cache.write() as out:
        out.table("questions").write(rows)
        out.extra_manifest.update({"stats": stats, "report": report})
    return cache.result()
