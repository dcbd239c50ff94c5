"""A pipeline run's record: what the `laptop` and `gpu` presets measured, in one JSON document
read from the run's artifacts (never recomputed): each stage's seconds when it was computed, the
held-out gain of REALM over null-only (`realm_gain`), zero-shot recall, and Table 1 with paired
intervals (`openqa_eval`). `realm record` writes it; README's and the docs' tables are rendered
from the copy in bench/results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flows.demo import cpu_description
from realm_core.config import PipelineConfig
from realm_core.store.artifacts import ArtifactStore


def run_record(cfg: PipelineConfig, store: ArtifactStore, stage_seconds: dict[str, float]) -> dict[str, Any]:
    """The record of the run of `cfg` whose artifacts are in `store` (every stage must be there:
    nothing is trained here); `stage_seconds`: each stage's seconds when it was computed."""
    from realm_core.graph.resolver import Resolver
    from realm_core.graph.stages import PIPELINE_TARGETS, closure
    from realm_core.store.cache import existing_artifacts_only

    resolver = Resolver(cfg, store)
    with existing_artifacts_only():
        gain = resolver.run("realm_gain")
        pretrain = resolver.run("pretrain")
        evaluated = resolver.run("openqa_eval")
    if gain.ref is None or evaluated.ref is None or pretrain.ref is None:
        raise ValueError(f"preset {cfg.preset!r}: the record needs the gain pair (gain.enabled) and Table 1")
    measured = gain.stats
    heldout = measured["heldout"]
    results = store.open(evaluated.ref).manifest["results"]
    openqa: dict[str, Any] = {}
    for dataset, r in results.items():
        k = next(int(key[2:]) for s in r["systems"].values() for key in s if key.startswith("R@") and " " not in key)
        openqa[dataset] = {
            "questions": r["questions"],
            "systems": {name: {"EM": s["EM"], "F1": s["F1"], "R@5": s.get(f"R@{k}") if k == 5 else None}
                        for name, s in r["systems"].items()},
            "paired": dict(_realm_first(pair, p) for pair, p in r.get("paired", {}).items())}
    stages = {name: round(stage_seconds[name], 1) for name in closure(cfg, PIPELINE_TARGETS) if name in stage_seconds}
    zero = measured.get("zero_shot") or {}
    return {
        "preset": cfg.preset,
        "wall_seconds": round(sum(stages.values()), 1),
        "precision": pretrain.stats["precision"],
        "cpu": cpu_description(),
        "stages": stages,
        "heldout": {"examples": heldout["examples"], "recoverable": heldout["recoverable"],
                    "systems": heldout["systems"], "gain": heldout["gain"], "by_retrieval": heldout["by_retrieval"]},
        "holder_retrieval": measured.get("holder_retrieval"),
        "zero_shot": {key: zero[key] for key in ("questions", "before", "after", "R@5 after - before",
                                                  "R@20 after - before") if key in zero},
        "openqa": openqa,
    }


def _realm_first(pair: str, p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A paired difference "A - B" as the record states it: REALM first wherever it is one side
    (the sign and interval turned with it), so "REALM - ICT (ORQA-like)" reads as REALM's gain."""
    from realm_core.systems import REALM

    a, b = pair.split(" - ", 1)
    entry = {"delta": p["delta"], "ci95": list(p["ci95"]), "mcnemar_p": p["mcnemar_p"]}
    if b == REALM.name:
        return f"{b} - {a}", {"delta": -entry["delta"], "ci95": [-entry["ci95"][1], -entry["ci95"][0]],
                              "mcnemar_p": entry["mcnemar_p"]}
    return pair, entry


def stage_seconds(reports: Path, preset: str) -> dict[str, float]:
    """Each stage's seconds when last computed on this store, as the pipeline's progress line
    records them (`reports/stage-seconds-<preset>.json`)."""
    path = reports / f"stage-seconds-{preset}.json"
    return {k: float(v) for k, v in json.loads(path.read_text()).items()} if path.is_file() else {}
