"""Stage reports: a Prefect markdown artifact per stage and a progress reporter on the run log."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import get_run_context
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger

from realm_core.graph.resolver import StageRun, measured_run
from realm_core.progress import LogProgress, Progress
from realm_core.store.artifacts import StageResult


def run_progress() -> LogProgress:
    """Progress on the run log; on the module logger when called outside a run (`task.fn`)."""
    try:
        logger = get_run_logger()
    except MissingContextError:
        logger = get_logger("realm")
    return LogProgress(logger, every=10.0)


def stage_markdown(stage: str, ref: Any, cached: bool, stats: dict[str, Any],
                   seconds: float, extra: str = "", config: dict[str, Any] | None = None,
                   location: str | None = None, peak_rss_mb: float | None = None) -> str:
    where = ref.path if ref else location or "none (stage off in this config)"
    lines = [f"## {stage}{' (cache hit)' if cached else ''}", "",
             "| field | value |", "|---|---|",
             f"| artifact | `{where}` |",
             f"| content hash | `{ref.content_hash[:16] if ref else ''}` |",
             f"| seconds | {seconds:.1f} |"]
    if peak_rss_mb is not None:
        lines.append(f"| peak resident memory | {peak_rss_mb:,.0f} MB |")
    for k, v in stats.items():
        lines.append(f"| {k} | {json.dumps(v) if isinstance(v, dict) else v} |")
    if extra:
        lines += ["", extra]
    if config:
        lines += ["", "### config", "", "```json", json.dumps(config, indent=2, sort_keys=True), "```"]
    return "\n".join(lines)


def publish_stage_report(stage: str, ref: Any, cached: bool, stats: dict[str, Any],
                         seconds: float, extra: str = "", config: dict[str, Any] | None = None,
                         location: str | None = None, peak_rss_mb: float | None = None) -> str:
    md = stage_markdown(stage, ref, cached, stats, seconds, extra, config, location, peak_rss_mb)
    try:
        get_run_context()
    except MissingContextError:
        return md  # called as task.fn outside a run: nothing to attach the artifact to
    key = re.sub(r"[^a-z0-9]+", "-", stage.lower()).strip("-")  # Prefect: lowercase, digits, dashes
    create_markdown_artifact(markdown=md, key=key, description=f"realm {stage} report")
    return md


def reported_stage(name: str, title: str, run: Callable[[Progress], StageResult | None],
                   config: dict[str, Any]) -> StageRun:
    """The one path of every task that runs a stage: time the realm_core call (given the run's
    progress reporter), publish its report with the config it ran on, and return the StageRun
    that flows pass on (artifact, cache hit or not, stats, seconds, report)."""
    done = measured_run(name, config, lambda: run(run_progress()))
    publish_stage_report(title, done.ref, done.cached, done.stats, done.seconds, done.report, done.config,
                         peak_rss_mb=done.peak_rss_mb)
    return done
