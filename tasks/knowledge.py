"""The thin task of the knowledge corpus's nightly growth: add the folder's documents (only new
blocks embedded) and publish the counts as the run's report."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from realm_core.config import PipelineConfig
from realm_core.graph.resolver import Resolver
from realm_core.knowledge.add import add_documents
from realm_core.store.artifacts import ArtifactStore
from tasks.reporting import publish_stage_report, run_progress


@task(name="add-documents", cache_policy=NO_CACHE)
def add_documents_task(cfg: PipelineConfig, root: str, files: list[str], kind: str, remove_sources: list[str],
                       reembed_all: bool) -> dict[str, Any]:
    progress = run_progress()
    added = add_documents(Resolver(cfg, ArtifactStore(root)), files, kind, None, [], remove_sources,
                          progress, log=progress.logger.info, reembed_all=reembed_all)
    stats = {"version": added.version, "previous version": added.previous, **added.counts,
             "files": len(files), "sources removed": ", ".join(remove_sources) or "none"}
    publish_stage_report("knowledge corpus", None, False, stats, added.seconds, added.summary(),
                         location=f"{root}/knowledge (version {added.version})")
    return {"version": added.version, "counts": added.counts, "seconds": added.seconds}
