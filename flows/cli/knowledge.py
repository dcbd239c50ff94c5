"""`realm add` and `realm knowledge`: the knowledge corpus a trained system answers from, grown,
shrunk and rolled back without training again (realm_core/knowledge/add.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.cli.common import ConfigFile, Overrides, Preset, Root, app, errors, out, resolver
from realm_core.systems import DEFAULT_ASK, choices

Kind = Annotated[str, typer.Option(help="the files' format: jsonl (one {id, title, text} a line), wikipedia "
                                        "(.xml/.xml.bz2 dump), squad, dpr_json or dpr_tsv")]


@app.command()
def add(files: Annotated[list[Path] | None, typer.Argument(help="documents to add, or to replace where their ids "
                                                                  "are known")] = None,
        kind: Kind = "jsonl",
        name: Annotated[list[str] | None, typer.Option(
            help="source name: the prefix of the new doc ids and what --remove-source names later; "
                 "once for every file, or once per file in the files' order [default: each file's name]")] = None,
        remove: Annotated[list[str] | None, typer.Option(
            "--remove", help="a doc id to remove (repeatable)")] = None,
        remove_source: Annotated[list[str] | None, typer.Option(
            "--remove-source", help="remove every document of this source (repeatable)")] = None,
        reembed: Annotated[bool, typer.Option(
            "--reembed", help="then embed every block again with each tracked encoder: a full re-index of "
                              "the corpus (what an add avoids)")] = False,
        preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
        root: Root = None,
        system_dir: Annotated[Path | None, typer.Option(
            "--system-dir", help="grow an exported system's knowledge corpus (`realm export`)")] = None) -> None:
    """Grow the [bold]knowledge corpus[/] a trained system answers from, without training again: cut the new documents into blocks with the system's tokenizer, embed only those blocks with its frozen document encoders, and publish a new version atomically. Adding the same file again changes nothing; a document whose id is known and whose content changed replaces its blocks; block ids never change. `realm search`, `realm ask` and a running `realm serve-qa` answer from the new version at once. The first add makes the pretraining corpus the corpus's first version.

    Examples: realm add notes.jsonl
              realm add enwiki-part2.xml.bz2 --kind wikipedia --name enwiki2
              realm add squad-more.jsonl wiki-more.jsonl --name squad --name enwiki  (one process, one encoder load)
              realm add --remove-source notes
              realm add notes.jsonl --system-dir exported/ict"""
    from flows.cli.query import engine_for
    from realm_core.errors import ConfigError
    from realm_core.system_bundle import add_to_engine

    with errors():
        if not files and not remove and not remove_source and not reembed:
            raise ConfigError("nothing to do: give files to add, --remove DOC_ID, --remove-source NAME or --reembed")
        # the corpus an exported system (--system-dir) or this store answers from: the same engine
        # `realm ask` and `realm serve-qa` build, grown by the one function that knows both kinds
        engine = engine_for(system_dir, preset, config, overrides, root)
        added = add_to_engine(engine, [str(f) for f in files or []], kind, name or [], remove or [],
                              remove_source or [], reembed_all=reembed, log=out.print)
        out.print(added.summary())


@app.command()
def knowledge(action: Annotated[str, typer.Argument(help="list, or rollback")] = "list",
              version: Annotated[int | None, typer.Argument(help="rollback: the version to make current")] = None,
              preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
              root: Root = None) -> None:
    """The [bold]knowledge corpus[/]'s versions (what each added, changed, removed and reused), or make an older one current again (`realm knowledge rollback 3`): the pointer moves atomically and a running service follows it.

    Examples: realm knowledge
              realm knowledge rollback 2"""
    from realm_core.errors import ConfigError
    from realm_core.knowledge.versions import KnowledgeCorpus

    with errors():
        corpus = KnowledgeCorpus.of_store(resolver(preset, config, overrides, root).store)
        if action == "rollback":
            if version is None:
                raise ConfigError("rollback: give the version to make current (`realm knowledge` lists them)")
            corpus.set_current(version)
            out.print(f"knowledge version {version} is current")
            return
        if action != "list":
            raise ConfigError(f"{action!r}: expected list or rollback")
        numbers = corpus.versions()
        if not numbers:
            out.print(f"{corpus.root}: no knowledge corpus yet; the system answers from the pretraining corpus "
                      "(`realm add FILE` starts one)")
            return
        current = corpus.current_number()
        table = Table(title=str(corpus.root))
        for col in ("version", "current", "created", "documents", "blocks", "added", "changed", "removed",
                    "blocks embedded"):
            table.add_column(col)
        for n in numbers:
            m = corpus.version(n).manifest
            c = m["counts"]
            table.add_row(str(n), "*" if n == current else "", m["created_at"], f"{m['documents']:,}",
                          f"{m['blocks']:,}", str(c["documents_added"]), str(c["documents_changed"]),
                          str(c["documents_removed"]), f"{c['blocks_embedded']:,}")
        out.print(table)


@app.command()
def export(dest: Annotated[Path, typer.Argument(help="the folder to write (it must not exist)")],
           system: Annotated[str, typer.Option(help=f"the fine-tuned system: {choices()}")] = DEFAULT_ASK.key,
           force: Annotated[bool, typer.Option("--force", help="replace the folder if it exists")] = False,
           preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
           root: Root = None) -> None:
    """Write a trained system as [bold]one folder[/] to hand to a colleague: the span reader and (dense systems) both encoders as Hugging Face model folders (safetensors) with a model card each (what it was trained on, the config, the measured EM and recall with their intervals, the command that reproduces them), the knowledge corpus it answers from, and system.json (every file's size and sha256). On another machine, with neither this store nor the data: `realm ask --system-dir DIR`, `realm serve-qa --system-dir DIR`, and `realm add --system-dir DIR FILE` grows it.

    Example: realm export exported/ict --system ict"""
    from realm_core.system_bundle import export_system

    with errors():
        export_system(resolver(preset, config, overrides, root), system, dest, log=out.print, replace=force)
