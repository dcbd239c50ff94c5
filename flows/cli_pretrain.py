"""`realm pretrain` and the data-parallel launch it shares with `realm finetune`."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli import (
    ConfigFile,
    Force,
    Nproc,
    Overrides,
    Preset,
    Root,
    _blocks,
    _errors,
    _pretrain_retriever,
    _report,
    _setup,
    app,
    out,
    relaunch_under_torchrun,
)
from flows.progress_bar import RichProgress


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
    from realm_core.distributed import Placement, rank_zero_first
    from realm_core.pretrain.stage import run_pretrain
    from realm_core.progress import NoProgress
    from realm_core.spans.mining import run_mine_spans

    with _errors():
        sets = list(overrides or [])
        if sync_refresh is not None:
            sets.append(f"pretrain.sync_refresh={str(sync_refresh).lower()}")
        if retrieval is not None:
            sets.append(f"pretrain.retrieval={retrieval}")
        cfg, store = _setup(preset, config, sets, root)
        placement = Placement.from_env(cfg.pretrain.device, cfg.pretrain.precision)
        with rank_zero_first(placement):  # upstream stages run once, the other ranks hit the cache
            blocks = _blocks(cfg, store)
            spans = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress())
            retriever_ref = _pretrain_retriever(cfg, store, blocks, spans)
        result = run_pretrain(store, blocks.ref, spans.ref, retriever_ref, cfg.pretrain, cfg.masking,
                              cfg.embed, cfg.index, RichProgress() if placement.is_main else NoProgress(),
                              force=force)
        placement.close()
        if placement.is_main:
            _report(f"REALM model ({cfg.pretrain.retrieval})", result.ref, result.cached, result.stats)
            out.print(result.report)
