"""`realm`: the command line. Stage commands call realm_core directly (no Prefect needed);
`realm pipeline` runs the Prefect flow with an embedded (ephemeral) Prefect.

Every stage command takes the same config options: --preset, --config FILE, --set stage.field=v.
Upstream stages are resolved through the artifact cache, so `realm chunk` after `realm ingest`
reuses the documents, and on a fresh root it ingests first.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flows.progress_bar import RichProgress, console
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
out = Console(markup=False)  # reports and values hold user text: print it as it is

Preset = Annotated[str, typer.Option("--preset", "-p", help="tiny (tests), demo (laptop), paper")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", exists=True, dir_okay=False,
                                                    help="YAML file of stage sections")]
Overrides = Annotated[list[str] | None, typer.Option(
    "--set", "-s", help="override one field, e.g. --set chunk.max_wordpieces=128 (repeatable)")]
Root = Annotated[str | None, typer.Option(help="artifact root (path or fsspec URL)")]
Force = Annotated[bool, typer.Option("--force", help="recompute even if a cached artifact exists")]


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except RealmError as e:
        # the message names user files and values verbatim: never read as Rich markup
        console.print(Text.assemble(("error:", "bold red"), f" {e}"), soft_wrap=True)
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


Dask = Annotated[str | None, typer.Option(
    help="run the stage's units (source files, shards of blocks) on Dask workers through "
         "Prefect's Dask task runner: local:N (a "
         "LocalCluster of N processes) or a scheduler address tcp://host:8786; the workers must "
         "share the artifact root (and, to ingest, see the source files)")]
Nproc = Annotated[int, typer.Option(
    min=1, help="data-parallel processes on this machine (relaunches under torchrun: gloo on CPU, "
                "nccl on GPUs); for several machines run torchrun yourself")]


def relaunch_under_torchrun(nproc: int) -> None:
    """With --nproc N > 1 outside torchrun: run this same command line once per rank (without
    --nproc, which torchrun would read as its own option); torchrun sets WORLD_SIZE, so the ranks
    do not relaunch again."""
    if nproc <= 1 or "WORLD_SIZE" in os.environ:
        return
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--nproc" or arg.startswith("--nproc="):
            skip = arg == "--nproc"
            continue
        args.append(arg)
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={nproc}", "-m", "flows.cli", *args])


Workers = Annotated[int | None, typer.Option(help="processes cleaning wikitext (ingest.workers)")]
Sources = Annotated[list[str] | None, typer.Option(
    "--source", help="KIND:PATH replacing the preset's sources (repeatable); KIND is one of "
                     "wikipedia, squad, dpr_json, dpr_tsv, jsonl")]


def _ingest_overrides(overrides: list[str] | None, workers: int | None, source: list[str] | None) -> list[str]:
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


def _documents(cfg: PipelineConfig, store: ArtifactStore, dask: str | None, force: bool) -> tuple[Any, bool, dict[str, Any]]:
    """(ref, cached, stats) of the documents stage, in this process or fanned out over Dask."""
    from realm_core.ingest.stage import run_ingest

    if dask:
        from flows.fanout import dask_runner, ingest_corpus_dask

        fanned = ingest_corpus_dask.with_options(task_runner=dask_runner(dask))(cfg.ingest, store.url, force)
        return fanned["ref"], fanned["cached"], fanned["stats"]
    result = run_ingest(store, cfg.ingest, RichProgress(), force=force)
    return result.ref, result.cached, result.stats


@app.command()
def ingest(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
           root: Root = None, force: Force = False, dask: Dask = None, workers: Workers = None,
           source: Sources = None) -> None:
    """Corpora -> [bold]documents[/]: stream Wikipedia dumps (.xml/.xml.bz2), SQuAD JSON, DPR passages or JSONL; keep namespace-0 articles, count redirects and disambiguation pages.

    Examples: realm ingest --source wikipedia:enwiki-latest-pages-articles.xml.bz2 --workers 8
              realm ingest --source wikipedia:pages-articles1.xml.bz2 --source wikipedia:pages-articles2.xml.bz2 --dask local:2"""
    with _errors():
        cfg, store = _setup(preset, config, _ingest_overrides(overrides, workers, source), root)
        _report("documents", *_documents(cfg, store, dask, force))


def _blocks(cfg: PipelineConfig, store: ArtifactStore) -> Any:
    """The blocks of this config, through the cache (ingesting and chunking first if needed)."""
    from realm_core.blocks import run_chunk
    from realm_core.ingest.stage import run_ingest

    docs = run_ingest(store, cfg.ingest, RichProgress())
    return run_chunk(store, docs.ref, cfg.chunk, RichProgress())


def _warm_start(cfg: PipelineConfig, store: ArtifactStore, force: bool = False) -> tuple[Any, Any]:
    """(blocks, retriever) results: ICT over the blocks and their mined sentences."""
    from realm_core.retrieval.warm_start import run_warm_start_ict
    from realm_core.spans.mining import run_mine_spans

    blocks = _blocks(cfg, store)
    spans = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress())
    return blocks, run_warm_start_ict(store, blocks.ref, spans.ref, cfg.ict, RichProgress(), force=force)


def _pretrain_retriever(cfg: PipelineConfig, store: ArtifactStore, blocks: Any, spans: Any) -> Any:
    """The artifact ref `pretrain.warm_start` names (trained through the cache), or None."""
    from realm_core.retrieval.warm_start import run_warm_start_ict, run_warm_start_retromae

    if cfg.pretrain.warm_start == "ict":
        return run_warm_start_ict(store, blocks.ref, spans.ref, cfg.ict, RichProgress()).ref
    if cfg.pretrain.warm_start == "retromae":
        return run_warm_start_retromae(store, blocks.ref, cfg.retromae, RichProgress()).ref
    return None


@app.command()
def chunk(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
          root: Root = None, force: Force = False, dask: Dask = None, workers: Workers = None,
          source: Sources = None) -> None:
    """documents -> [bold]blocks[/] `[CLS] title [SEP] body [SEP]` of at most chunk.max_wordpieces (REALM: 288) wordpieces, cut at sentence ends where possible. Ingests first through the cache, with ingest's options (--source, --workers, --dask).

    Examples: realm chunk --preset demo --set chunk.max_wordpieces=128
              realm chunk --source jsonl:my_corpus.jsonl"""
    from realm_core.blocks import run_chunk

    with _errors():
        cfg, store = _setup(preset, config, _ingest_overrides(overrides, workers, source), root)
        docs, _, _ = _documents(cfg, store, dask, force=False)  # --force recomputes the blocks only
        result = run_chunk(store, docs, cfg.chunk, RichProgress(), force=force)
        _report("blocks", result.ref, result.cached, result.stats)


@app.command("mine-spans")
def mine_spans(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
               root: Root = None, force: Force = False, dask: Dask = None) -> None:
    """blocks -> [bold]salient spans[/]: named entities (spaCy NER, only its 'ner' pipe) and dates (regexes), per sentence, the longer span winning an overlap (REALM §3.4).

    Example: realm mine-spans --preset demo --set spans.n_process=2 (or --dask local:4)"""
    from realm_core.spans.mining import run_mine_spans

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        blocks = _blocks(cfg, store)
        if dask:
            from flows.fanout import dask_runner, mine_spans_dask

            fanned = mine_spans_dask.with_options(task_runner=dask_runner(dask))(blocks.ref, cfg.spans, store.url,
                                                                                 force)
            _report("salient spans", fanned["ref"], fanned["cached"], fanned["stats"])
            return
        result = run_mine_spans(store, blocks.ref, cfg.spans, RichProgress(), force=force)
        _report("salient spans", result.ref, result.cached, result.stats)


@app.command("warm-start")
def warm_start(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
               root: Root = None, force: Force = False,
               method: Annotated[str, typer.Option(
                   help="ict (Inverse Cloze Task, ORQA) or retromae (masked auto-encoder, "
                        "settings under retromae.*)")] = "ict") -> None:
    """blocks (+ sentences) -> [bold]retriever[/]: train the query and document encoders before REALM (§3.4). ict: a sentence retrieves its own block, the rest of the batch are negatives. retromae: the block's [CLS] state must let a one-layer decoder rebuild the block (Xiao et al. 2022). Checkpoints as training goes; rerun the same command to resume.

    Examples: realm warm-start --method ict --preset demo --set ict.steps=300
              realm warm-start --method retromae --set retromae.enhanced_decoding=false"""
    from realm_core.retrieval.warm_start import run_warm_start_retromae

    with _errors():
        if method not in ("ict", "retromae"):
            raise RealmError(f"--method {method!r}: expected 'ict' or 'retromae'")
        cfg, store = _setup(preset, config, overrides, root)
        if method == "ict":
            _, result = _warm_start(cfg, store, force)
        else:
            result = run_warm_start_retromae(store, _blocks(cfg, store).ref, cfg.retromae,
                                             RichProgress(), force=force)
        _report(f"retriever ({'ICT' if method == 'ict' else 'RetroMAE'})", result.ref, result.cached,
                result.stats)
        out.print(result.report)


@app.command("refresh-index")
def refresh_index(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
                  root: Root = None,
                  encoder: Annotated[str | None, typer.Option(
                      help="document encoder: a retriever artifact's doc_encoder dir, HF dir or "
                           "bundled name (default: embed.doc_encoder)")] = None,
                  dask: Dask = None) -> None:
    """blocks -> [bold]embeddings[/] -> [bold]index/v<step>[/]: embed every block with the document encoder and switch the index pointer to the new version atomically.

    Example: realm refresh-index --encoder work/artifacts/retriever/<key>/doc_encoder --dask local:2"""
    from realm_core.retrieval.stage import run_build_index, run_embed_blocks

    with _errors():
        sets = list(overrides or []) + ([f"embed.doc_encoder={encoder}"] if encoder else [])
        cfg, store = _setup(preset, config, sets, root)
        blocks = _blocks(cfg, store)
        if dask:
            from flows.fanout import dask_runner, embed_blocks_dask

            fanned = embed_blocks_dask.with_options(task_runner=dask_runner(dask))(blocks.ref, cfg.embed, store.url)
            _report("embeddings", fanned["ref"], fanned["cached"], fanned["stats"])
            emb_ref = fanned["ref"]
        else:
            result = run_embed_blocks(store, blocks.ref, cfg.embed, RichProgress())
            _report("embeddings", result.ref, result.cached, result.stats)
            emb_ref = result.ref
        built = run_build_index(store, emb_ref, blocks.ref, cfg.index)
        _report("index", built.ref, built.cached, built.stats)


@app.command("evaluate-retrieval")
def evaluate_retrieval(preset: Preset = "demo", config: ConfigFile = None,
                       overrides: Overrides = None, root: Root = None,
                       json_out: Annotated[Path | None, typer.Option(
                           "--json", help="also write the results as JSON here")] = None) -> None:
    """Recall@1/5/20 and MRR of BM25, the untrained projection, the ICT retriever and an off-the-shelf reference, on SQuAD-open (articles 30-39 vs every block) and the DPR NQ sample (vs its passages). Trains the warm start first if it is not cached.

    Example: realm evaluate-retrieval --preset demo --json work/reports/retrieval.json"""
    from realm_core.retrieval.evaluation import run_evaluate_retrieval, standard_systems

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        blocks, retriever = _warm_start(cfg, store)
        systems = standard_systems(retriever.ref, cfg.embed, cfg.ict.encoder,
                                   cfg.ict.projection_dim, cfg.ict.seed)
        result = run_evaluate_retrieval(store, blocks.ref, systems, cfg.retrieval_eval, RichProgress())
        out.print(result.report)
        if json_out is not None:
            manifest = store.open(result.ref).manifest
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps({"preset": preset, "artifact": result.ref.path,
                                            "results": manifest["results"],
                                            "systems": manifest["systems"]}, indent=2) + "\n")


@app.command()
def questions(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
              root: Root = None) -> None:
    """Open-QA benchmarks -> one [bold]questions[/] table: NQ-open, WebQuestions, CuratedTREC (answer regexes), SQuAD-open split by article; every dropped line counted by reason.

    Example: realm questions --preset demo"""
    from realm_core.openqa.stage import run_load_questions

    with _errors():
        cfg, store = _setup(preset, config, overrides, root)
        result = run_load_questions(store, cfg.questions)
        _report("questions", result.ref, result.cached, {})
        out.print(result.report)


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
        for name in ("ingest", "chunk", "spans", "masking", "ict", "embed", "index",
                     "retrieval_eval", "pretrain"):
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


# the other commands register themselves on import
from flows import cli_data, cli_openqa, cli_pretrain  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console entry
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    # `python -m flows.cli` (as torchrun starts each rank): the commands of cli_data, cli_openqa and
    # cli_pretrain register on the imported module's app, not on this __main__ copy's
    from flows.cli import main as imported_main

    imported_main()
