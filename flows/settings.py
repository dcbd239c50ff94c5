"""What every flow resolves the same way: the config (preset + file + overrides) and the root."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from realm_core.config import PipelineConfig, load_config, work_dir
from realm_core.presets import DESCRIPTIONS


def resolve(preset: str, config_file: str | None, overrides: list[str] | None,
            root: str | None) -> tuple[PipelineConfig, str]:
    cfg = load_config(preset, config_file, overrides or [])
    return cfg, root or str(work_dir() / "artifacts")


# The parameters every stage flow and realm/full-pipeline take, typed and described once: Prefect
# builds each deployment's run form from the annotations (a choice for `preset`, examples) and
# reads each field's text from the docstring's Args section, which `described` writes.
PresetName = Literal["tiny", "demo", "laptop", "gpu", "paper"]
PARAMETER_DOCS = {
    "preset": "; ".join(f"{name}: {text}" for name, text in DESCRIPTIONS.items()) + ".",
    "config_file": "A YAML file of stage sections laid over the preset, as `realm --config` takes it "
                   "(a path on the worker's machine).",
    "overrides": "One stage.field=value per item, applied last, as the command line's --set "
                 "(values read as YAML), e.g. pretrain.refresh_every=100.",
    "root": "The artifact store: a folder or an fsspec URL (default $REALM_WORK_DIR/artifacts).",
    "force": "Recompute this flow's stages even if they are cached (never their upstream stages).",
    "dask": "Run the stage's units (source files, shards of blocks) on Dask workers: local:N for a "
            "LocalCluster of N processes, or a scheduler address tcp://host:8786.",
}
Preset = Annotated[PresetName, Field(examples=["demo"])]
ConfigFile = Annotated[str | None, Field(examples=["experiments/configs/realm_mechanism.yaml"])]
Overrides = Annotated[list[str] | None, Field(examples=[["pretrain.refresh_every=100", "precision=fp32"]])]
Root = Annotated[str | None, Field(examples=["work/artifacts"])]
Force = bool
Dask = Annotated[str | None, Field(examples=["local:2"])]

F = TypeVar("F", bound=Callable[..., Any])


def described(fn: F) -> F:
    """`fn` with an Args section for each of its parameters that PARAMETER_DOCS describes, the
    form Prefect reads into a deployment's parameter schema."""
    import inspect

    names = [n for n in inspect.signature(fn).parameters if n in PARAMETER_DOCS]
    args = "\n".join(f"    {n}: {PARAMETER_DOCS[n]}" for n in names)
    fn.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\nArgs:\n{args}\n"
    return fn
