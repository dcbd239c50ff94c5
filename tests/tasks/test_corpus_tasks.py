from pathlib import Path

from realm_core.config import load_config
from realm_core.graph.resolver import Resolver
from realm_core.graph.stages import StageInputs, stage
from realm_core.store.artifacts import ArtifactStore
from tasks.reporting import stage_markdown
from tasks.stages import stage_task


def test_the_stage_task_runs_the_graph_runner_and_hits_the_cache(shared_data: Path, tmp_path: Path) -> None:
    cfg = load_config("tiny")
    store = ArtifactStore(str(tmp_path / "art"))
    first = stage_task.fn(stage("ingest"), StageInputs(cfg, store, {}))
    assert first.cached is False and first.ref is not None and first.ref.kind == "documents"
    again = stage_task.fn(stage("ingest"), StageInputs(cfg, store, {}))
    assert again.cached is True and again.ref == first.ref
    assert first.config == {"ingest": cfg.ingest.model_dump(mode="json")}
    blocks = stage_task.fn(stage("chunk"), StageInputs(cfg, store, {"ingest": first.ref}))
    assert blocks.ref is not None and blocks.ref.kind == "blocks" and blocks.stats["documents"] == 70
    # the task and the plain hook resolve the same artifact
    assert Resolver(cfg, store).run("chunk").ref == blocks.ref


def test_the_stage_report_carries_the_config_it_ran_on(shared_data: Path, tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides=["chunk.max_wordpieces=96"])
    run = Resolver(cfg, ArtifactStore(str(tmp_path / "art"))).run("chunk")
    md = stage_markdown("chunk", run.ref, run.cached, run.stats, run.seconds, config=run.config,
                        peak_rss_mb=run.peak_rss_mb)
    assert '"max_wordpieces": 96' in md and run.ref is not None and run.ref.path in md
    assert run.peak_rss_mb is not None and f"| peak resident memory | {run.peak_rss_mb:,.0f} MB |" in md
