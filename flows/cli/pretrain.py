"""`realm pretrain`: REALM pretraining, on one process or data parallel under torchrun."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.common import (
    ConfigFile,
    Force,
    Nproc,
    Overrides,
    Preset,
    Root,
    app,
    close_process_group,
    errors,
    is_main_rank,
    out,
    relaunch_under_torchrun,
    report,
    resolver,
)


@app.command()
def pretrain(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, force: Force = False,
             sync_refresh: Annotated[bool | None, typer.Option(
                 "--sync-refresh/--async-refresh",
                 help="wait for each index refresh (deterministic) or keep training on the old index "
                      "(default: pretrain.sync_refresh)")] = None,
             retrieval: Annotated[str | None, typer.Option(
                 help="realm, or null_only for the BERT-style baseline (REALM Table 2)")] = None,
             nproc: Nproc = 1) -> None:
    """blocks + salient spans + warm-started retriever -> [bold]REALM model[/]: masked salient spans predicted by marginalising over the top-k retrieved blocks and the null block; retriever and reader trained jointly; index refreshed every pretrain.refresh_every steps. Killed runs resume from their last checkpoint when rerun, on any number of processes.

    Example: realm pretrain --preset demo --sync-refresh --set pretrain.steps=400

    Data parallel: realm pretrain --nproc 2, or torchrun --nproc-per-node 8 -m flows.cli pretrain --preset paper"""
    relaunch_under_torchrun(nproc)
    with errors():
        sets = list(overrides or [])
        if sync_refresh is not None:
            sets.append(f"pretrain.sync_refresh={str(sync_refresh).lower()}")
        if retrieval is not None:
            sets.append(f"pretrain.retrieval={retrieval}")
        stages = resolver(preset, config, sets, root, force=["pretrain"] if force else [])
        run = stages.run("pretrain")
        close_process_group(stages.cfg.pretrain.device)
        report(f"REALM model ({stages.cfg.pretrain.retrieval})", run)
        if is_main_rank():
            out.print(run.report)
