import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

from flows.stages import pretrain_realm
from realm_core.store.artifacts import ArtifactStore
from tests.conftest import TinyUpstream

pytestmark = pytest.mark.slow


def test_pretraining_flow_runs_each_refresh_as_a_subflow(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    shutil.copytree(tiny_upstream[0], root)  # ingest to ICT: cache hits for the flow's upstream stages
    # a deployment run with one field typed into the UI's form: the tiny preset plus that change
    overrides = ["pretrain.refresh_every=3"]
    state = pretrain_realm(preset="tiny", overrides=overrides, root=root, return_state=True)
    assert state.is_completed()
    result = state.result()["pretrain"]
    assert result.stats["steps"] == 4 and result.cached is False
    cli = subprocess.run([sys.executable, "-m", "flows.cli", "config", "--preset", "tiny", "--set", overrides[0]],
                         capture_output=True, text=True, env=dict(os.environ, COLUMNS="200"), check=True)
    cli_hash = next(line.split()[-1] for line in cli.stdout.splitlines() if line.startswith("pretrain: config hash"))
    manifest = ArtifactStore(root).open(result.ref).manifest
    assert manifest["config_hash"].startswith(cli_hash) and result.config["pretrain"]["refresh_every"] == 3

    async def children() -> list[str]:
        async with get_client() as client:
            runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])))
            flows = {r.flow_id: (await client.read_flow(r.flow_id)).name for r in runs}
            return sorted(flows[r.flow_id] for r in runs)

    # the run's initial index (ICT, retriever step 4) and its step-3 refresh (step 7)
    assert asyncio.run(children()) == ["refresh-pretraining-index", "refresh-pretraining-index"]
    again = pretrain_realm(preset="tiny", overrides=overrides, root=root)["pretrain"]
    assert again.cached is True
