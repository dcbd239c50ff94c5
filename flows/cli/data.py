"""`realm data list` and `realm data fetch`: the data sources registry (data/sources.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.cli.common import data_app, errors, out


@data_app.command("list")
def data_list() -> None:
    """List registered corpora and QA sets, and whether REALM_DATA_DIR has each."""
    from realm_core.config import data_dir
    from realm_core.sources import load_registry

    with errors():
        t = Table(title=f"sources (REALM_DATA_DIR={data_dir()})")
        for col in ("name", "format", "present", "licence", "path"):
            t.add_column(col)
        for s in load_registry().values():
            t.add_row(s.name, s.format, "yes" if (data_dir() / s.path).is_file() else "no",
                      s.licence, s.path)
        out.print(t)


@data_app.command("fetch")
def data_fetch(name: Annotated[list[str], typer.Argument(help="source names (see `realm data list`)")],
               url: Annotated[str | None, typer.Option(help="mirror URL (file:// works)")] = None,
               dest: Annotated[Path | None, typer.Option(help="default data/downloads")] = None) -> None:
    """Download sources and verify their sha256; then use REALM_DATA_DIR=data/downloads."""
    from realm_core.sources import DOWNLOADS, fetch

    with errors():
        for n in name:
            path = fetch(n, dest or DOWNLOADS, url=url)
            out.print(f"{n}: {path} (sha256 verified)")
