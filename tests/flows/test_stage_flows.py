import asyncio
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)

from flows.ingest_corpus import chunk_blocks, ingest_corpus
from realm_core.config import IngestConfig


def test_stage_flows_chain_and_cache(shared_data: Path, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    docs = ingest_corpus(preset="tiny", root=root)
    blocks = chunk_blocks(documents=docs["ref"], preset="tiny", root=root)
    assert docs["cached"] is False and blocks["cached"] is False
    # without a documents ref the chunk flow resolves ingest through the cache
    again = chunk_blocks(preset="tiny", root=root)
    assert again["cached"] is True and again["ref"] == blocks["ref"]

    async def artifact_keys() -> set[str]:
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts() if a.key}

    assert {"ingest", "chunk"} <= asyncio.run(artifact_keys())


def test_bad_input_fails_the_flow_run_with_the_message_in_its_logs(tmp_path: Path) -> None:
    bad = tmp_path / "broken.jsonl"
    bad.write_text("{oops\n")
    cfg = IngestConfig(sources=({"kind": "jsonl", "path": str(bad)},))
    state = ingest_corpus(config=cfg, root=str(tmp_path / "art"), return_state=True)
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
    from flows.mine_salient_spans import mine_salient_spans

    root = str(tmp_path / "art")
    first = mine_salient_spans(preset="tiny", root=root)
    assert first["cached"] is False and first["stats"]["blocks"] == 612
    assert first["stats"]["spans"] > 500
    again = mine_salient_spans(preset="tiny", root=root)
    assert again["cached"] is True and again["ref"] == first["ref"]


def test_refresh_index_flow_builds_and_switches(shared_data: Path, tmp_path: Path) -> None:
    from flows.refresh_index import refresh_index
    from realm_core.artifacts import ArtifactStore
    from realm_core.retrieval.versions import current_step

    root = str(tmp_path / "art")
    first = refresh_index(preset="tiny", root=root)
    assert first["embed"]["stats"]["blocks"] == 612 and first["index"]["stats"]["step"] == 0
    assert current_step(ArtifactStore(root)) == 0
    again = refresh_index(preset="tiny", root=root)
    assert again["embed"]["cached"] is True and again["index"]["cached"] is True


def test_warm_start_flow_then_nightly_refresh_uses_the_newest_retriever(shared_data: Path,
                                                                        tmp_path: Path) -> None:
    from flows.refresh_index import refresh_index
    from flows.warm_start import warm_start_ict
    from realm_core.artifacts import ArtifactStore
    from realm_core.retrieval.versions import current_step, load_index

    root = str(tmp_path / "art")
    first = warm_start_ict(preset="tiny", root=root)
    assert first["cached"] is False and first["stats"]["steps"] == 4
    assert warm_start_ict(preset="tiny", root=root)["cached"] is True
    store = ArtifactStore(root)
    assert store.open(first["ref"]).rows("ict_curve") == 4
    assert not (Path(root) / "checkpoints" / f"warm-start-{Path(first['ref'].path).name}").exists()
    # no explicit encoder: the nightly deployment embeds with the newest retriever (ICT step 4)
    refreshed = refresh_index(preset="tiny", root=root)
    assert refreshed["index"]["stats"]["step"] == 4 and current_step(store) == 4
    assert load_index(store)[1].manifest["encoder_checkpoint"].endswith("/doc_encoder")
