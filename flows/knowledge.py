"""The knowledge corpus's flow: `grow-knowledge`, deployed nightly after `refresh-index`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from prefect import flow
from pydantic import Field

from flows.settings import (
    PARAMETER_DOCS,
    ConfigFile,
    Force,
    Overrides,
    Preset,
    Root,
    described,
    resolve,
)
from tasks.knowledge import add_documents_task

PARAMETER_DOCS.update({
    "folder": "A folder of documents on the worker's machine (default $REALM_WORK_DIR/documents): each "
              "file's new or changed documents are added (a file's source name is its name), the rest reused.",
    "kind": "The files' format: jsonl (one {id, title, text} a line), wikipedia (.xml or .xml.bz2 dumps), "
            "squad, dpr_json or dpr_tsv.",
    "prune": "Also remove the documents of every earlier-added source whose file is no longer in the folder.",
})
Folder = Annotated[str | None, Field(examples=["work/documents"])]
Kind = Annotated[str, Field(examples=["jsonl"])]


@flow(name="grow-knowledge", log_prints=True)
@described
def grow_knowledge(preset: Preset = "demo", config_file: ConfigFile = None, overrides: Overrides = None,
                   root: Root = None, force: Force = False, folder: Folder = None, kind: Kind = "jsonl",
                   prune: bool = False) -> dict[str, Any]:
    """The knowledge corpus the systems answer from, grown from a folder of documents without
    training again: the new and changed documents cut into blocks and only those embedded, with
    the frozen document encoders the query side searches with; a new version published and made
    current (a running `realm serve-qa` follows it). Its report counts the documents and blocks
    added, changed, removed and reused. `force` embeds every block again (a full re-index)."""
    from realm_core.config import work_dir
    from realm_core.knowledge.add import folder_files, vanished_sources
    from realm_core.knowledge.versions import KnowledgeCorpus

    cfg, root = resolve(preset, config_file, overrides, root)
    path = Path(folder) if folder else work_dir() / "documents"
    path.mkdir(parents=True, exist_ok=True)
    files = folder_files(path, kind)
    corpus = KnowledgeCorpus(f"{root}/knowledge")
    if not files and corpus.current_number() is None:
        print(f"{path}: no documents, and no knowledge corpus yet: the systems answer from the pretraining corpus")
        return {"version": None, "counts": {}, "seconds": 0.0}
    removed = vanished_sources(corpus, files) if prune else []
    return add_documents_task(cfg, root, [str(f) for f in files], kind, removed, force)
