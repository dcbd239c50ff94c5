import asyncio
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

from flows.pretrain_realm import pretrain_realm

pytestmark = pytest.mark.slow


def test_pretraining_flow_runs_each_refresh_as_a_subflow(shared_data: Path, tmp_path: Path) -> None:
    root = str(tmp_path / "art")
    state = pretrain_realm(preset="tiny", root=root, return_state=True)
    assert state.is_completed()
    result = state.result()
    assert result["stats"]["steps"] == 4 and result["cached"] is False

    async def children() -> list[str]:
        async with get_client() as client:
            runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])))
            flows = {r.flow_id: (await client.read_flow(r.flow_id)).name for r in runs}
            return sorted(flows[r.flow_id] for r in runs)

    # tiny: the run's initial index (ICT, retriever step 4) and its step-2 refresh (step 6)
    assert asyncio.run(children()) == ["refresh-index", "refresh-index"]
    again = pretrain_realm(preset="tiny", root=root)
    assert again["cached"] is True
