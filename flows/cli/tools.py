"""`realm inspect`, `realm config`, `realm stages`, `realm pipeline`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.cli.common import ConfigFile, Dask, Force, Overrides, Preset, Root, app, errors, out


@app.command()
def inspect(artifact: Annotated[str, typer.Argument(help="artifact directory (or fsspec URL)")],
            rows: Annotated[int, typer.Option(help="sample rows to show per table")] = 3) -> None:
    """Show an artifact's manifest, row counts and a few sample rows."""
    from realm_core.artifacts import ArtifactStore

    with errors():
        store = ArtifactStore(str(Path(artifact).parent) if "://" not in artifact else artifact)
        art = store.open(artifact)
        m = art.manifest
        summary = {k: m.get(k) for k in ("kind", "schema_version", "content_hash", "config_hash",
                                          "package_version", "created_at", "rows", "inputs")}
        out.print_json(json.dumps(summary))
        if m.get("stats"):
            out.print_json(json.dumps({"stats": m["stats"]}))
        for table in m["rows"]:
            sample = art.read_table(table).slice(0, rows).to_pylist()
            t = Table(title=f"{table}: {m['rows'][table]} rows")
            for col in (sample[0] if sample else {}):
                t.add_column(col, overflow="fold", max_width=60)
            for r in sample:
                t.add_row(*[(str(v)[:200] + "…") if len(str(v)) > 200 else str(v) for v in r.values()])
            out.print(t)


@app.command("config")
def show_config(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None) -> None:
    """Print the resolved configuration (preset + YAML + overrides) and each section's hash."""
    with errors():
        from realm_core.config import load_config
        from realm_core.stage_config import StageConfig

        cfg = load_config(preset, config, overrides or [])
        out.print_json(cfg.model_dump_json())
        for name in type(cfg).model_fields:
            if isinstance(section := getattr(cfg, name), StageConfig):
                out.print(f"{name}: config hash {section.config_hash()[:16]}")


@app.command()
def stages(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None) -> None:
    """The stage graph for this config: each stage, the config sections it reads and the stages it needs, in the order the pipeline runs them."""
    with errors():
        from realm_core.config import load_config
        from realm_core.graph import PIPELINE_TARGETS, STAGES, closure

        cfg = load_config(preset, config, overrides or [])
        in_pipeline = set(closure(cfg, PIPELINE_TARGETS))
        t = Table(title=f"stages ({preset})")
        for col in ("stage", "reads", "needs", "in the pipeline"):
            t.add_column(col)
        for s in STAGES:
            t.add_row(s.name, ", ".join(s.sections), ", ".join(s.upstream(cfg)) or "-",
                      "yes" if s.name in in_pipeline else "no")
        out.print(t)


@app.command()
def pipeline(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, force: Force = False, dask: Dask = None) -> None:
    """Run the whole pipeline as the Prefect flow `realm` with an embedded Prefect (no server)."""
    with errors():
        from flows.pipeline import full_pipeline

        result = full_pipeline(preset=preset, config_file=str(config) if config else None,
                               overrides=overrides or [], root=root, force=force, dask=dask)
        out.print_json(json.dumps(result))
