"""Dask fan-out of ingestion, block embedding and span mining: a 2-worker LocalCluster writes
the one-process artifact."""

import asyncio
from pathlib import Path

import numpy as np
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

from realm_core.errors import ConfigError

pytestmark = pytest.mark.slow


async def _completed_task_runs(name: str) -> int:
    async with get_client() as client:
        runs = await client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=name)))
        return sum(1 for r in runs if r.state is not None and r.state.is_completed())


def test_dask_workers_ingest_the_source_files_of_the_one_process_artifact(shared_data: Path, tmp_path: Path) -> None:
    from flows.stages import ingest_corpus
    from realm_core.config import load_config
    from realm_core.ingest.stage import run_ingest
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    ingest = load_config("tiny").ingest  # 4 sources: two Wikipedia dumps, SQuAD, DPR
    before = asyncio.run(_completed_task_runs("ingest-source"))
    fanned = ingest_corpus(preset="tiny", root=root, dask="local:2")["ingest"]
    assert asyncio.run(_completed_task_runs("ingest-source")) - before == len(ingest.sources) == 4
    store = ArtifactStore(root)
    dask_art = store.open(fanned.ref, kind="documents")
    local = run_ingest(store, ingest, force=True)  # this process, the same cache key: replaced in place
    assert local.ref.path == fanned.ref.path
    local_art = store.open(local.ref, kind="documents")
    assert local_art.manifest["stats"] == dask_art.manifest["stats"]
    assert local.ref.content_hash == fanned.ref.content_hash  # the very same Parquet files
    assert local_art.rows("documents") == 70
    assert not any(".parquet" in f and "source-" in f for f in dask_art.manifest["files"])


def test_dask_workers_embed_the_shards_of_the_one_process_artifact(shared_data: Path, tmp_path: Path) -> None:
    from flows.stages import refresh_index
    from realm_core.config import load_config
    from realm_core.retrieval.embed import load_embeddings
    from realm_core.retrieval.stage import run_embed_blocks
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    # 612 blocks: 4 shards; their first 32 wordpieces (the fan-out, not the length, is tested)
    sets = ["embed.shard_size=200", "embed.encoder_from=config", "embed.max_length=32"]
    runs = refresh_index(preset="tiny", overrides=sets, root=root, dask="local:2")
    fanned, blocks = runs["embed"], runs["chunk"].ref
    embed = load_config("tiny", overrides=sets).embed
    store = ArtifactStore(root)
    dask_art = store.open(fanned.ref, kind="embeddings")
    shards = dask_art.manifest["embeddings"]["shards"]
    assert [(s["file"], s["first_block_id"], s["rows"]) for s in shards] == [
        ("shard-00000.npy", 0, 200), ("shard-00001.npy", 200, 200), ("shard-00002.npy", 400, 200),
        ("shard-00003.npy", 600, 12)]
    dask_vectors = load_embeddings(Path(dask_art.path) / "embeddings", dask_art.manifest["embeddings"], 612)

    assert asyncio.run(_completed_task_runs("embed-shard")) >= 4
    # this process, the same config: the same cache key, the same shards and vectors
    local = run_embed_blocks(store, blocks, embed, force=True)
    assert local.ref.path == fanned.ref.path
    local_art = store.open(local.ref, kind="embeddings")
    assert local_art.manifest["embeddings"]["shards"] == shards
    local_vectors = load_embeddings(Path(local_art.path) / "embeddings", local_art.manifest["embeddings"], 612)
    np.testing.assert_allclose(dask_vectors, local_vectors, atol=1e-5)


def test_dask_workers_mine_the_rows_of_the_one_process_artifact(shared_data: Path, tmp_path: Path) -> None:
    from flows.stages import mine_salient_spans
    from realm_core.config import load_config
    from realm_core.spans.mining import run_mine_spans
    from realm_core.store.artifacts import ArtifactStore

    root = str(tmp_path / "art")
    sets = ["spans.shard_size=250"]  # 612 blocks: 3 shards
    runs = mine_salient_spans(preset="tiny", overrides=sets, root=root, dask="local:2")
    fanned, blocks = runs["spans"], runs["chunk"].ref
    spans = load_config("tiny", overrides=sets).spans
    store = ArtifactStore(root)
    dask_art = store.open(fanned.ref, kind="salient_spans")
    dask_tables = {t: dask_art.read_table(t).to_pylist() for t in ("sentences", "salient_spans")}
    local = run_mine_spans(store, blocks, spans, force=True)  # the same cache key: replaced in place
    assert local.ref.path == fanned.ref.path
    local_art = store.open(local.ref, kind="salient_spans")
    for table, rows in dask_tables.items():
        assert rows == local_art.read_table(table).to_pylist()
    assert len(dask_tables["salient_spans"]) > 1000 and dask_tables["sentences"][-1]["block_id"] == 611
    assert dask_art.manifest["stats"] == local_art.manifest["stats"]


def test_dask_addresses_are_checked() -> None:
    from flows.fanout import dask_runner

    with pytest.raises(ConfigError, match="local:N"):
        dask_runner("local:zero")
    assert dask_runner("tcp://127.0.0.1:8786").address == "tcp://127.0.0.1:8786"
