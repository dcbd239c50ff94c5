"""`realm`: the command line. Stage commands call realm_core directly (no Prefect needed);
`realm pipeline` runs the Prefect flow with an embedded (ephemeral) Prefect.

Every stage command takes the same config options: --preset, --config FILE, --set stage.field=v.
Upstream stages are resolved through the artifact cache, so `realm chunk` after `realm ingest`
reuses the documents, and on a fresh root it ingests first.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from realm_core.errors import RealmError

if TYPE_CHECKING:
    from realm_core.artifacts import ArtifactStore
    from realm_core.config import PipelineConfig

app = typer.Typer(
    help="REALM pipeline: ingest -> chunk -> (spans, warm start, index, pretrain, QA). "
         "Artifacts go to --root (default $REALM_WORK_DIR/artifacts).",
    no_args_is_help=True, rich_markup_mode="rich", pretty_exceptions_enable=False)
data_app = typer.Typer(help="The data sources registry (data/sources.yaml): list and fetch.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")
console = Console(stderr=True)
out = Console()

Preset = Annotated[str, typer.Option("--preset", "-p", help="tiny (tests), demo (laptop), paper")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", exists=True, dir_okay=False,
                                                    help="YAML file of stage sections")]
Overrides = Annotated[list[str] | None, typer.Option(
    "--set", "-s", help="override one field, e.g. --set chunk.max_wordpieces=128 (repeatable)")]
Root = Annotated[str | None, typer.Option(help="artifact root (path or fsspec URL)")]
Force = Annotated[bool, typer.Option("--force", help="recompute even if a cached artifact exists")]


class RichProgress:
    """realm_core.progress.Progress shown as a rich bar with a rate column, one bar per step."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._unit = ""

    def start(self, description: str, total: int | None, unit: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._unit = unit
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                             console=console)
        self._bar.start()
        self._task = self._bar.add_task(description, total=total, rate="")

    def advance(self, n: int = 1) -> None:
        task = self._bar.tasks[0]
        elapsed = task.elapsed or 1e-9
        self._bar.update(self._task, advance=n,
                         rate=f"{(task.completed + n) / elapsed:,.1f} {self._unit}/s")

    def finish(self) -> None:
        task = self._bar.tasks[0]
        if task.total is None:
            self._bar.update(self._task, total=task.completed)
        self._bar.stop()


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except RealmError as e:
        console.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(2) from None


def _setup(preset: str, config: Path | None, overrides: list[str] | None,
           root: str | None) -> tuple[PipelineConfig, ArtifactStore]:
    from realm_core.artifacts import ArtifactStore
    from realm_core.config import load_config, work_dir

    cfg = load_config(preset, config, overrides or [])
    store = ArtifactStore(root or work_dir() / "artifacts")
    return cfg, store


def _report(title: str, ref: Any, cached: bool, stats: dict[str, Any]) -> None:
    table = Table(title=f"{title}{' (cached)' if cached else ''}", show_header=False)
    table.add_row("artifact", ref.path)
    table.add_row("content hash", ref.content_hash[:16])
    for k, v in stats.items():
        table.add_row(k, json.dumps(v) if isinstance(v, dict) else str(v))
    out.print(table)


@app.command()
def ingest(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
           root: Root = None, force: Force = False,
           workers: Annotated[int | None, typer.Option(help="processes cleaning wikitext")] = None,
           source: Annotated[list[str] | None, typer.Option(
               help="KIND:PATH replacing the preset's sources (repeatable); KIND is one of "
                    "wikipedia, squad, dpr_json, dpr_tsv, jsonl")] = None) -> None:
    """Corpora -> [bold]documents[/]: stream Wikipedia dumps (.xml/.xml.bz2), SQuAD JSON, DPR passages or JSONL; keep namespace-0 articles, count redirects and disambiguation pages.

    Example: realm ingest --source wikipedia:enwiki-latest-pages-articles.xml.bz2 --workers 8"""
    from realm_core.ingest.stage import run_ingest

    with _errors():
        sets = list(overrides or [])
        if workers is not None:
            sets.append(f"ingest.workers={workers}")
        if source:
            specs = []
            for s in source:
                kind, sep, path = s.partition(":")
                if not sep:
                    raise RealmError(f"--source {s!r}: expected KIND:PATH")
                specs.append({"kind": kind, "path": str(Path(path).resolve())})
            sets.append(f"ingest.sources={json.dumps(specs)}")
        cfg, store = _setup(preset, config, sets, root)
        result = run_ingest(store, cfg.ingest, RichProgress(), force=force)
        _report("documents", result.ref, result.cached, result.stats)


@app.command()
def chunk(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
          root: Root = None, force: Force = False) -> None:
    """documents -> [bold]blocks[/] `[CLS] title [SEP] body [SEP]` of at most chunk.max_wordpieces (REALM: 288) wordpieces, cut at sentence ends where possible.

    Example: realm chunk --preset demo --set chunk.max_wordpieces=128"""
    from realm_core.blocks import run_chunk
    from realm_core.ingest.stage import run_ingest

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        docs = run_ingest(store, cfg.ingest, RichProgress())
        result = run_chunk(store, docs.ref, cfg.chunk, RichProgress(), force=force)
        _report("blocks", result.ref, result.cached, result.stats)


@app.command("mine-spans")
def mine_spans(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
               root: Root = None, force: Force = False) -> None:
    """blocks -> [bold]salient spans[/]: named entities (spaCy NER, only its 'ner' pipe) and dates (regexes), per sentence, the longer span winning an overlap (REALM §3.4).

    Example: realm mine-spans --preset demo --set spans.n_process=2"""
    from realm_core.blocks import run_chunk
    from realm_core.ingest.stage import run_ingest
    from realm_core.spans.mining import run_mine_spans

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        docs = run_ingest(store, cfg.ingest, RichProgress())
        blocks = run_chunk(store, docs.ref, cfg.chunk, RichProgress())
        result = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress(), force=force)
        _report("salient spans", result.ref, result.cached, result.stats)


@app.command()
def inspect(artifact: Annotated[str, typer.Argument(help="artifact directory (or fsspec URL)")],
            rows: Annotated[int, typer.Option(help="sample rows to show per table")] = 3) -> None:
    """Show an artifact's manifest, row counts and a few sample rows."""
    from realm_core.artifacts import ArtifactStore

    with _errors():
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
def show_config(preset: Preset = "demo", config: ConfigFile = None,
                overrides: Overrides = None) -> None:
    """Print the resolved configuration (preset + YAML + overrides) and each stage's hash."""
    with _errors():
        from realm_core.config import load_config

        cfg = load_config(preset, config, overrides or [])
        out.print_json(cfg.model_dump_json())
        for name in ("ingest", "chunk", "spans", "masking", "ict", "pretrain"):
            out.print(f"{name}: config hash {getattr(cfg, name).config_hash()[:16]}")


@app.command()
def pipeline(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None) -> None:
    """Run the whole pipeline as the Prefect flow `realm` with an embedded Prefect (no server)."""
    with _errors():
        from flows.pipeline import full_pipeline

        result = full_pipeline(preset=preset, config_file=str(config) if config else None,
                               overrides=overrides or [], root=root)
        out.print_json(json.dumps(result))


@data_app.command("list")
def data_list() -> None:
    """List registered corpora and QA sets, and whether REALM_DATA_DIR has each."""
    from realm_core.config import data_dir
    from realm_core.sources import load_registry

    with _errors():
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

    with _errors():
        for n in name:
            path = fetch(n, dest or DOWNLOADS, url=url)
            out.print(f"{n}: {path} (sha256 verified)")


def main() -> None:  # pragma: no cover - console entry
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
