"""`realm ingest`, `realm chunk`, `realm mine-spans`: the corpus stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import (
    ConfigFile,
    Dask,
    Force,
    Overrides,
    Preset,
    Root,
    app,
    errors,
    report,
    resolver,
)
from realm_core.errors import RealmError

Workers = Annotated[int | None, typer.Option(help="processes cleaning wikitext (ingest.workers)")]
Sources = Annotated[list[str] | None, typer.Option(
    "--source", help="KIND:PATH replacing the preset's sources (repeatable); KIND is one of "
                     "wikipedia, squad, dpr_json, dpr_tsv, jsonl")]


def ingest_overrides(overrides: list[str] | None, workers: int | None, source: list[str] | None) -> list[str]:
    """--set items plus what --workers and --source say, as ingest.* overrides."""
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
    return sets


@app.command()
def ingest(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
           root: Root = None, force: Force = False, dask: Dask = None, workers: Workers = None,
           source: Sources = None) -> None:
    """Corpora -> [bold]documents[/]: stream Wikipedia dumps (.xml/.xml.bz2), SQuAD JSON, DPR passages or JSONL; keep namespace-0 articles, count redirects and disambiguation pages.

    Examples: realm ingest --source wikipedia:enwiki-latest-pages-articles.xml.bz2 --workers 8
              realm ingest --source wikipedia:pages-articles1.xml.bz2 --source wikipedia:pages-articles2.xml.bz2 --dask local:2"""
    with errors():
        stages = resolver(preset, config, ingest_overrides(overrides, workers, source), root,
                          force=["ingest"] if force else [], dask=dask)
        report("documents", stages.run("ingest"))


@app.command()
def chunk(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
          root: Root = None, force: Force = False, dask: Dask = None, workers: Workers = None,
          source: Sources = None) -> None:
    """documents -> [bold]blocks[/] `[CLS] title [SEP] body [SEP]` of at most chunk.max_wordpieces (REALM: 288) wordpieces, cut at sentence ends where possible. Ingests first through the cache, with ingest's options (--source, --workers, --dask).

    Examples: realm chunk --preset demo --set chunk.max_wordpieces=128
              realm chunk --source jsonl:my_corpus.jsonl"""
    with errors():
        stages = resolver(preset, config, ingest_overrides(overrides, workers, source), root,
                          force=["chunk"] if force else [], dask=dask)
        report("blocks", stages.run("chunk"))


@app.command("mine-spans")
def mine_spans(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
               root: Root = None, force: Force = False, dask: Dask = None) -> None:
    """blocks -> [bold]salient spans[/]: named entities (spaCy NER, only its 'ner' pipe) and dates (regexes), per sentence, the longer span winning an overlap (REALM §3.4).

    Example: realm mine-spans --preset demo --set spans.n_process=2 (or --dask local:4)"""
    with errors():
        stages = resolver(preset, config, overrides, root, force=["spans"] if force else [], dask=dask)
        report("salient spans", stages.run("spans"))
