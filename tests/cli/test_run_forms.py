"""Each deployment's run form documents itself: Prefect's parameter schema of every entrypoint in
prefect.yaml offers `preset` as a choice of the presets that exist, describes every parameter,
and shows an example override. Fast: the schema is built from the flow's signature alone."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from realm_core.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


def schema(entrypoint: str) -> dict[str, Any]:
    from prefect.utilities.callables import parameter_schema

    module, name = entrypoint.split(":")
    flow = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), name)
    return parameter_schema(flow.fn).model_dump()


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["entrypoint"].split(":")[1])
def test_every_parameter_of_a_run_form_is_described(deployment: dict[str, Any]) -> None:
    props = schema(deployment["entrypoint"])["properties"]
    assert {"preset", "config_file", "overrides", "root", "force"} <= set(props)
    assert props["preset"]["enum"] == list(PRESETS)  # the presets that exist, in their order
    assert deployment["parameters"]["preset"] in props["preset"]["enum"]
    undescribed = [name for name, p in props.items() if len(p.get("description") or "") < 20]
    assert undescribed == []
    assert any("=" in item for item in props["overrides"]["examples"][0])


def test_the_graph_prefect_yaml_and_the_flows_name_the_same_stage_flows() -> None:
    """Which flow owns a stage is declared once (`Stage.flow`); the pipeline's FLOW_OF is derived
    from it, and prefect.yaml deploys exactly the flows the graph names, plus the pipeline."""
    from flows.pipeline import FANS_OUT, FLOW_OF, FLOWS
    from realm_core.graph.stages import STAGES

    # the pipeline, each stage's flow, and the knowledge corpus's flow (no stage: it grows the
    # corpus a trained system answers from)
    named = {s.flow for s in STAGES if s.flow is not None}
    assert named == set(FLOWS)
    assert {s.name for s in STAGES if s.flow is not None} == set(FLOW_OF)
    deployed = {d["entrypoint"] for d in DEPLOYMENTS}
    assert deployed == {"flows/pipeline.py:full_pipeline", "flows/knowledge.py:grow_knowledge",
                        *(f"flows/stages.py:{f.fn.__name__}" for f in FLOWS.values())}
    # a flow that owns a stage which fans out takes `dask`
    assert {s.flow for s in STAGES if s.fans_out} <= FANS_OUT


def test_prefect_yaml_is_what_the_flows_generate() -> None:
    """prefect.yaml is generated from the flows (`python -m flows.deployments`): a stage flow added
    to the graph, a changed docstring or a preset's deployment reaches it only through the
    generator, and an edit by hand fails here."""
    from flows.deployments import main

    assert main(["--check"]) == 0, "prefect.yaml differs: run python -m flows.deployments"
    names = [(d["name"], d["parameters"]["preset"]) for d in DEPLOYMENTS]
    assert ("full-pipeline", "demo") in names and ("laptop", "laptop") in names and ("gpu", "gpu") in names
    assert sorted(d["name"] for d in DEPLOYMENTS if d.get("schedules")) == ["grow-knowledge", "refresh-index"]
