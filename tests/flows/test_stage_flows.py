import asyncio
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)

from flows.stages import chunk_blocks, ingest_corpus


def test_stage_flows_chain_and_cache(shared_data: Path, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    docs = ingest_corpus(preset="tiny", root=root)["ingest"]
    runs = chunk_blocks(preset="tiny", root=root)
    assert docs.cached is False and runs["chunk"].cached is False
    assert runs["ingest"].cached is True and runs["ingest"].ref == docs.ref  # upstream through the cache
    again = chunk_blocks(preset="tiny", root=root)["chunk"]
    assert again.cached is True and again.ref == runs["chunk"].ref
    # force recomputes the flow's own stage, never its upstream
    forced = chunk_blocks(preset="tiny", root=root, force=True)
    assert forced["chunk"].cached is False and forced["ingest"].cached is True

    async def artifact_keys() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts() if a.key}

    assert {"ingest", "chunk"} <= asyncio.run(artifact_keys())


def test_bad_input_fails_the_flow_run_with_the_message_in_its_logs(tmp_path: Path) -> None:
    bad = tmp_path / "broken.jsonl"
    bad.write_text("{oops\n")
    sources = f'ingest.sources=[{{"kind": "jsonl", "path": "{bad}"}}]'
    state = ingest_corpus(preset="tiny", overrides=[sources], root=str(tmp_path / "art"), return_state=True)
    assert state.is_failed()

    async def logs() -> str:
        async with get_client() as client:
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            assert runs[0].state.is_failed()
            entries = await client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))
            return "\n".join(e.message for e in entries)

    text = asyncio.run(logs())
    assert "broken.jsonl at line 1: expected a JSON object" in text
    assert not (tmp_path / "art" / "documents").exists()


def test_span_flow_resolves_upstream_through_the_cache(shared_data: Path, tmp_path: Path) -> None:
    from flows.stages import mine_salient_spans

    root = str(tmp_path / "art")
    first = mine_salient_spans(preset="tiny", root=root)["spans"]
    assert first.cached is False and first.stats["blocks"] == 612
    assert first.stats["spans"] > 500
    again = mine_salient_spans(preset="tiny", root=root)["spans"]
    assert again.cached is True and again.ref == first.ref


def test_refresh_index_flow_builds_and_switches(shared_data: Path, tmp_path: Path) -> None:
    from flows.stages import refresh_index
    from realm_core.retrieval.versions import current_step
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    untrained = ["embed.encoder_from=config"]  # embed.doc_encoder as it is: no warm start
    first = refresh_index(preset="tiny", overrides=untrained, root=root)
    assert first["embed"].stats["blocks"] == 612 and first["index"].stats["step"] == 0
    assert "ict" not in first and current_step(ArtifactStore(root)) == 0
    again = refresh_index(preset="tiny", overrides=untrained, root=root)
    assert again["embed"].cached is True and again["index"].cached is True


def test_warm_start_flow_then_nightly_refresh_uses_the_newest_retriever(shared_data: Path,
                                                                        tmp_path: Path) -> None:
    from flows.stages import refresh_index, warm_start_ict
    from realm_core.retrieval.versions import current_step, load_index
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    first = warm_start_ict(preset="tiny", root=root)["ict"]
    assert first.cached is False and first.stats["steps"] == 4
    assert warm_start_ict(preset="tiny", root=root)["ict"].cached is True
    store = ArtifactStore(root)
    assert store.open(first.ref).rows("ict_curve") == 4
    assert not (Path(root) / "checkpoints" / f"retriever-{Path(first.ref.path).name}").exists()
    # the nightly deployment's override: embed with the newest retriever (ICT, step 4)
    refreshed = refresh_index(preset="tiny", overrides=["embed.encoder_from=latest"], root=root)
    assert refreshed["index"].stats["step"] == 4 and current_step(store) == 4
    assert load_index(store)[1].manifest["encoder_checkpoint"].endswith("/doc_encoder")


def test_every_stage_flow_takes_the_pipelines_parameters() -> None:
    """One flow signature: what the UI's form shows for every stage."""
    from flows import stages
    from flows.pipeline import FLOW_OF, full_pipeline

    common = ["preset", "config_file", "overrides", "root", "force"]
    flows = {f.name: f for f in [*FLOW_OF.values(), stages.ingest_corpus]}
    for f in [*flows.values(), full_pipeline]:
        names = list(f.parameters.properties)
        assert names[:5] == common, (f.name, names)
        assert names[5:] in ([], ["dask"]), (f.name, names)


def test_a_ui_run_with_one_override_resolves_the_preset_with_that_change(shared_data: Path, tmp_path: Path) -> None:
    """Rerunning a stage from the UI with one field typed in its form: the preset plus that one
    change, the same config (and cache key) as the command line's `--set`."""
    from flows.stages import chunk_blocks
    from realm_core.config import load_config
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    run = chunk_blocks(preset="tiny", overrides=["chunk.max_wordpieces=96"], root=root)["chunk"]
    cfg = load_config("tiny", overrides=["chunk.max_wordpieces=96"])
    assert run.config == {"chunk": cfg.chunk.model_dump(mode="json")}
    manifest = ArtifactStore(root).open(run.ref).manifest
    assert manifest["config_hash"] == cfg.chunk.config_hash()
    assert cfg.chunk.config_hash() != load_config("tiny").chunk.config_hash()


def test_the_stage_flows_are_the_graphs() -> None:
    """One owner for the stage list: every flow a stage names is declared in STAGE_FLOWS, each
    declared flow runs stages of its own, and flows/stages.py makes exactly those flows, under
    the names the deployments' entrypoints load."""
    from flows import stages
    from realm_core.config import load_config
    from realm_core.graph.stages import STAGE_FLOWS, STAGES

    declared = {f.name for f in STAGE_FLOWS}
    assert {s.flow for s in STAGES if s.flow is not None} == declared
    assert set(stages.FLOWS) == declared
    cfg = load_config("demo")
    for spec in STAGE_FLOWS:
        assert getattr(stages, spec.function) is stages.FLOWS[spec.name]
        targets = spec.targets(cfg)
        assert targets and all(t in {s.name for s in STAGES} for t in targets), spec.name
        assert ("dask" in stages.FLOWS[spec.name].parameters.properties) == spec.dask
