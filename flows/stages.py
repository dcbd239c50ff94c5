"""The stage flows: one Prefect flow for each of the graph's `STAGE_FLOWS` (realm_core/graph/stages.py
declares them beside the stages that name them), made here, each taking the same parameters as
`realm/full-pipeline` (preset, config_file, overrides, root, force, plus dask where its stages fan
out), so rerunning one stage from the UI resolves the preset with the overrides typed into its
form, exactly as the command line does. Each flow resolves its upstream stages through the
cache (a task per stage, a cache hit when it exists) and returns every stage it resolved."""

from __future__ import annotations

from prefect import Flow, flow

from flows.fanout import dask_hook
from flows.settings import ConfigFile, Dask, Force, Overrides, Preset, Root, described, resolve
from realm_core.config import EmbedConfig, IndexConfig
from realm_core.graph.resolver import Resolver, StageRun
from realm_core.graph.stages import STAGE_FLOWS, StageFlow
from realm_core.store.artifacts import ArtifactRef, ArtifactStore
from tasks.retrieval import build_index, embed_blocks
from tasks.stages import prefect_hook


def run_stages(targets: tuple[str, ...], preset: str, config_file: str | None, overrides: list[str] | None,
               root: str | None, force: bool, dask: str | None = None) -> dict[str, StageRun]:
    """Resolve `targets` (and what they need) with each stage a task of the calling flow;
    `force` recomputes the targets, never their upstream."""
    cfg, root = resolve(preset, config_file, overrides, root)
    resolver = Resolver(cfg, ArtifactStore(root), hook=dask_hook(dask, prefect_hook),
                        force=targets if force else ())

    def refresh(embed: EmbedConfig, index_root: str) -> None:
        refresh_pretraining_index(resolver.ref("chunk"), embed, cfg.index, root, index_root)

    resolver.refresh_index = refresh
    for name in targets:
        resolver.run(name)
    return resolver.runs


@flow(name="refresh-pretraining-index", log_prints=True)
def refresh_pretraining_index(blocks: ArtifactRef, embed: EmbedConfig, index: IndexConfig, root: str,
                              index_root: str) -> None:
    """A pretraining run's index refresh (REALM §3.4): every block re-embedded with the run's
    current document encoder, the new version built under the run's own index root."""
    embedded = embed_blocks(blocks, embed, root)
    assert embedded.ref is not None
    build_index(embedded.ref, blocks, index, root, index_root)


def _stage_flow(spec: StageFlow) -> Flow[..., dict[str, StageRun]]:
    """The Prefect flow of `spec`: its targets for the config its parameters resolve."""
    if spec.dask:
        def run(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                root: Root = None, force: Force = False, dask: Dask = None) -> dict[str, StageRun]:
            cfg, _ = resolve(preset, config_file, overrides, root)
            return run_stages(spec.targets(cfg), preset, config_file, overrides, root, force, dask)
    else:
        def run(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,  # type: ignore[misc]
                root: Root = None, force: Force = False) -> dict[str, StageRun]:
            cfg, _ = resolve(preset, config_file, overrides, root)
            return run_stages(spec.targets(cfg), preset, config_file, overrides, root, force)
    run.__name__ = run.__qualname__ = spec.function
    run.__doc__ = spec.description
    made: Flow[..., dict[str, StageRun]] = flow(name=spec.name, log_prints=True)(described(run))
    return made


# each flow a name of this module, the entrypoint its deployment loads (flows/stages.py:<function>)
FLOWS: dict[str, Flow[..., dict[str, StageRun]]] = {spec.name: _stage_flow(spec) for spec in STAGE_FLOWS}
globals().update({spec.function: FLOWS[spec.name] for spec in STAGE_FLOWS})
