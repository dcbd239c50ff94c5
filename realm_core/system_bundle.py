"""A trained system as one folder a colleague can run elsewhere (`realm export`): the span reader
and, for a dense system, its query and document encoders as Hugging Face model folders
(safetensors) with a model card each, the knowledge corpus it answers from (its blocks and their
vectors by the system's document encoder), and `system.json` (what the system is, the config it
was trained with, its measured results, and every file's size and sha256).

`BundleEngine` answers from such a folder with no artifact store and no data folder: `realm ask
--system-dir DIR`, `realm search --system-dir DIR`, `realm serve-qa --system-dir DIR`; and
`bundle_add` grows its knowledge corpus as `realm add` grows a store's (`realm add --system-dir`).

    DIR/system.json   DIR/reader/ (+ README.md)   DIR/query_encoder/ DIR/doc_encoder/ (dense systems)
    DIR/knowledge/CURRENT, DIR/knowledge/v00000001/ ...
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from realm_core.config import EmbedConfig, PipelineConfig, QueryConfig
from realm_core.errors import ConfigError, CorruptArtifactError
from realm_core.graph.resolver import Resolver
from realm_core.knowledge.add import Added, DocumentFiles, add_documents, block_embedder, grow
from realm_core.knowledge.versions import KnowledgeCorpus, vectors_file
from realm_core.openqa.reading import BlockStore
from realm_core.query import Answerer, LoadedSystem, QueryEngine
from realm_core.retrieval.retrievers import RETRIEVERS, Retriever, Sources
from realm_core.store.artifacts import sha256_file
from realm_core.store.versions import version_name

FORMAT = 1
MANIFEST = "system.json"


def _files(root: Path) -> dict[str, dict[str, Any]]:
    return {str(p.relative_to(root)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")}


def _results_of(evaluation: Any, name: str) -> dict[str, Any]:
    """The system's measured results in an `openqa_eval` manifest: per dataset EM, F1 and recall,
    and every paired difference it takes part in (delta, 95% interval, McNemar p)."""
    out: dict[str, Any] = {}
    for dataset, res in evaluation.manifest.get("results", {}).items():
        if name not in res.get("systems", {}):
            continue
        out[dataset] = {"questions": res["questions"], **{k: v for k, v in res["systems"][name].items()
                                                          if isinstance(v, float)},
                        "paired": {pair: p for pair, p in res.get("paired", {}).items() if name in pair}}
    return out


def model_card(title: str, role: str, manifest: dict[str, Any]) -> str:
    """A model folder's README: what it is, what it was trained on, its measured results with
    their intervals, and the command that reproduces them."""
    trained = manifest["trained_on"]
    lines = [f"# {title}", "", f"{role} of the open-QA system **{manifest['name']}** (`{manifest['system']}`), "
             "exported by realm (`realm export`). It loads with `transformers.AutoModel.from_pretrained` "
             "(the BERT body; realm's heads are `realm_retriever.json` / the span head beside it) and with "
             "`realm ask --system-dir` on the folder this one sits in.", "",
             "## Trained on", "",
             f"- corpus: {', '.join(trained['corpus'])} ({trained['blocks']:,} blocks of at most "
             f"{trained['max_wordpieces']} wordpieces)",
             f"- questions: {trained['questions']}", f"- preset: `{manifest['config']['preset']}`; the whole resolved "
             "config is in `system.json`", "", "## Measured", ""]
    metrics = manifest.get("metrics") or {}
    if not metrics:
        lines.append("No open-QA evaluation was in the store when this system was exported.")
    for dataset, m in metrics.items():
        scores = ", ".join(f"{k} {100 * v:.1f}" for k, v in m.items() if isinstance(v, float))
        lines.append(f"- {dataset} test ({m['questions']:,} questions): {scores}")
        for pair, p in m["paired"].items():
            lines.append(f"  - {pair}: {100 * p['delta']:+.1f} points [{100 * p['ci95'][0]:+.1f}, "
                         f"{100 * p['ci95'][1]:+.1f}], McNemar p {p['mcnemar_p']:.2g}")
    lines += ["", "## Reproduce", "", f"    {manifest['reproduce']}", ""]
    return "\n".join(lines)


def export_destination(dest: Path, store_root: Path | None, replace: bool) -> Path:
    """`dest` resolved, once it is checked to be a place an export may go, before anything is
    written: never the artifact store it exports from, inside it or above it; its parent an
    existing, writable folder outside /proc and /sys; and, where it exists, only with `replace`
    and only a previous export (a folder holding this format's system.json), never a file or a
    folder an export did not write."""
    resolved = dest.expanduser().resolve()
    if store_root is not None:
        root = store_root.resolve()
        if resolved == root or root in resolved.parents or resolved in root.parents:
            raise ConfigError(f"{resolved}: the artifact store {root} is there; export to a folder outside it")
    if resolved.parts[1:2] in (("proc",), ("sys",)):
        raise ConfigError(f"{resolved}: expected a folder on a file system, not under /{resolved.parts[1]}")
    parent = resolved.parent
    if not parent.is_dir():
        raise ConfigError(f"{resolved}: its parent {parent} is not an existing folder; create it first")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{resolved}: its parent {parent} is not writable")
    if resolved.exists() or resolved.is_symlink():
        if not replace:
            raise ConfigError(f"{resolved}: exists already; export to a new folder (or --force to replace an export)")
        if not resolved.is_dir() or resolved.is_symlink():
            raise ConfigError(f"{resolved}: expected a previous export to replace, found a file")
        try:
            previous = json.loads((resolved / MANIFEST).read_text()).get("format")
        except (OSError, ValueError, AttributeError):
            previous = None
        if previous != FORMAT:
            raise ConfigError(f"{resolved}: expected a previous export (its {MANIFEST}) to replace; --force "
                              "replaces only what an export wrote")
    return resolved


def export_system(resolver: Resolver, key: str, dest: str | Path, log: Callable[[str], None] | None = None,
                  replace: bool = False) -> Path:
    """Write system `key` of `resolver`'s store to `dest` (written beside it, then renamed into
    place: a reader never sees half a folder). The store's knowledge corpus is started first if
    it has none (its first version: the pretraining corpus)."""
    from realm_core.graph.stages import qa_system
    from realm_core.retrieval.stage import encoder_hash

    say = log or (lambda _: None)
    dest = export_destination(Path(dest), Path(str(resolver.store.root)) if resolver.store.local else None, replace)
    engine = QueryEngine(resolver)
    loaded = engine._system(key)  # the fine-tuned system as `realm ask` serves it (form, temperature)
    system = qa_system(engine.cfg, engine._refs(key), key)
    model = engine.stages.ref(f"finetune_{key}")
    corpus = KnowledgeCorpus.of_store(resolver.store)
    if corpus.current() is None:
        say("knowledge corpus: its first version is the pretraining corpus")
        add_documents(resolver, log=say)
    knowledge = corpus.current()
    assert knowledge is not None
    dense = RETRIEVERS[system.retrieval].needs_query_encoder
    doc_hash = encoder_hash(system.doc_embed.doc_encoder) if dense and system.doc_embed else None
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        shutil.copytree(f"{model.path}/reader", tmp / "reader")
        if dense and system.doc_embed is not None:
            shutil.copytree(f"{model.path}/query_encoder", tmp / "query_encoder")
            shutil.copytree(system.doc_embed.doc_encoder, tmp / "doc_encoder")
        # the knowledge corpus as its first version: its blocks, the system's encoder's vectors
        kv = tmp / "knowledge" / version_name(1)
        kv.mkdir(parents=True)
        shutil.copy2(knowledge.path / "blocks.parquet", kv / "blocks.parquet")
        encoders = {}
        if doc_hash is not None:
            shutil.copy2(knowledge.path / vectors_file(doc_hash), kv / vectors_file(doc_hash))
            encoders[doc_hash] = {"spec": "doc_encoder", "embed": knowledge.encoders[doc_hash]["embed"]}
        files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(kv.iterdir())}
        kmanifest = {**knowledge.manifest, "version": 1, "parent": None, "encoders": encoders, "files": files,
                     "exported_from": f"{corpus.root} version {knowledge.number}"}
        (kv / "manifest.json").write_text(json.dumps(kmanifest, indent=2))
        KnowledgeCorpus(tmp / "knowledge").pointer.write(1)
        evaluation = engine._newest_evaluation_artifact()
        cfg = engine.cfg
        manifest: dict[str, Any] = {
            "format": FORMAT, "system": key, "name": system.name, "retrieval": system.retrieval,
            "form": loaded.form, "temperature": loaded.temperature, "doc_encoder_hash": doc_hash,
            "doc_embed": system.doc_embed.model_dump(mode="json") if dense and system.doc_embed else None,
            "config": cfg.model_dump(mode="json"),
            "trained_on": {"corpus": [s.path for s in cfg.ingest.sources], "blocks": int(knowledge.manifest["blocks"]),
                           "max_wordpieces": cfg.chunk.max_wordpieces,
                           "questions": f"{cfg.finetune.dataset}/{cfg.finetune.split}"},
            "metrics": _results_of(evaluation, system.name) if evaluation is not None else None,
            "evaluation": evaluation.path if evaluation is not None else None,
            "reproduce": f"realm evaluate --preset {cfg.preset} --system {key} (config hash of finetune: "
                         f"{cfg.finetune.config_hash()[:16]}; the whole config is in system.json)",
            "exported_from": str(resolver.store.root),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        cards = {"reader": ("The span reader", "The reader (BERT + ORQA's span head)"),
                 "query_encoder": ("The query encoder", "The question encoder Embed_input"),
                 "doc_encoder": ("The document encoder", "The block encoder Embed_doc")}
        for folder, (title, role) in cards.items():
            if (tmp / folder).is_dir():
                (tmp / folder / "README.md").write_text(model_card(f"{title} of {system.name}", role, manifest))
        manifest["files"] = _files(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"exported {system.name} to {dest}")
    return dest


def read_manifest(path: Path) -> dict[str, Any]:
    file = path / MANIFEST
    if not file.is_file():
        raise ConfigError(f"{path}: not an exported system (no {MANIFEST}; `realm export` writes one)")
    try:
        manifest: dict[str, Any] = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptArtifactError(str(file), f"expected a JSON object ({type(e).__name__})") from None
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{file}: export format {manifest.get('format')!r}, expected {FORMAT}")
    return manifest


def query_settings(path: str | Path, overrides: Sequence[str]) -> QueryConfig | None:
    """The query side's settings of an exported system with `--set query.FIELD=VALUE` overrides
    (None without any): its models and corpus are fixed, so any other section is refused."""
    from realm_core.config.tree import config_tree

    if not overrides:
        return None
    others = [o for o in overrides if not o.strip().startswith("query.")]
    if others:
        raise ConfigError(f"--set {others[0]}: an exported system takes query.* settings only (its models "
                          "and knowledge corpus are what it was exported with)")
    manifest = read_manifest(Path(path).resolve())
    return PipelineConfig.model_validate(config_tree(manifest["config"], None, list(overrides), str(path))).query


class BundleEngine(Answerer):
    """The query side of an exported system: its one system, searched and asked from its own
    knowledge corpus, with nothing but the folder."""

    def __init__(self, path: str | Path, query: QueryConfig | None = None) -> None:
        """`query`: the query side's limits and precision here (default: the export's)."""
        self.path = Path(path).resolve()
        self.manifest = read_manifest(self.path)
        cfg = PipelineConfig.model_validate(self.manifest["config"])
        super().__init__(cfg if query is None else cfg.model_copy(update={"query": query}),
                         KnowledgeCorpus(self.path / "knowledge"))
        key, dense = self.manifest["system"], self.manifest["doc_encoder_hash"] is not None
        from realm_core.retrieval.retrievers import BM25, Dense

        self.searchers = {"index": (Dense.name, key) if dense else (BM25.name, None), BM25.name: (BM25.name, None)}

    def _tokenizer_source(self) -> str:
        return str(self.path / "reader")

    def _corpus_blocks(self) -> BlockStore:
        raise ConfigError(f"{self.path}/knowledge: no current knowledge version (the export wrote one)")

    def describe(self) -> dict[str, Any]:
        return {"system_dir": str(self.path), "system": self.manifest["system"], "preset": self.cfg.preset}

    def _retriever(self, kind: str, system_key: str | None, top_k: int | None = None,
                   query_encoder_dir: str | None = None) -> Retriever:
        from realm_core.retrieval.encoders import RetrieverEncoder

        sources = Sources(question_length=self.cfg.finetune.question_length, tokenizer=self.tokenizer,
                          knowledge=self.knowledge())
        if system_key is not None and self.manifest["doc_embed"] is not None:
            self._check_models()  # before a byte of the weights is loaded
            sources.doc_embed = EmbedConfig.model_validate({**self.manifest["doc_embed"],
                                                            "doc_encoder": str(self.path / "doc_encoder")})
            sources.query_encoder = self.for_inference(RetrieverEncoder.from_pretrained(str(self.path / "query_encoder")))
        RETRIEVERS[kind].check(sources)
        return RETRIEVERS[kind].build(self.blocks, self.max_k if top_k is None else top_k, sources)

    def _load_system(self, key: str) -> LoadedSystem:
        from realm_core.openqa.predict import QAModels
        from realm_core.openqa.span_reader import SpanReader

        if key != self.manifest["system"]:
            raise ConfigError(f"{self.path}: this folder holds system {self.manifest['system']!r}, not {key!r}")
        self._check_models()  # before a byte of the weights is loaded
        reader = self.for_inference(SpanReader.from_pretrained(str(self.path / "reader"), self.cfg.finetune.max_span_length))
        retriever = self._retriever(self.manifest["retrieval"], key, min(self.cfg.finetune.top_k, self.max_k))
        return LoadedSystem(QAModels(reader, getattr(retriever, "query_encoder", None)), retriever,
                            self.manifest["form"], self.manifest["temperature"], self.manifest["name"])

    def default_system(self) -> tuple[str, str]:
        return self.manifest["system"], f"{self.manifest['name']}: the exported system"

    def _check_models(self) -> int:
        """Every file of the export's models as system.json lists it (size, sha256)."""
        checked = 0
        for name, entry in self.manifest["files"].items():
            path = self.path / name
            if name.startswith("knowledge/"):
                continue  # versions change as the corpus grows: each checks its own files
            if not path.is_file() or path.stat().st_size != entry["size"] or sha256_file(path) != entry["sha256"]:
                raise CorruptArtifactError(str(path), "differs from the size and sha256 system.json lists")
            checked += entry["size"]
        return checked

    def health(self) -> dict[str, Any]:
        """Every file the export listed (size, sha256) and the current knowledge version's."""
        checked = self.check_served()
        knowledge = self.knowledge()
        return {"system": self.manifest["system"], "index_version": None,
                "knowledge_version": knowledge.number if knowledge is not None else None,
                "loaded": sorted(self.loaded_models()), "bytes_checked": checked, "verify": "content"}


def bundle_add(path: str | Path, paths: Sequence[str] = (), kind: str = "jsonl",
               name: str | Sequence[str] | None = None,
               remove_docs: Sequence[str] = (), remove_sources: Sequence[str] = (),
               log: Callable[[str], None] | None = None, reembed_all: bool = False,
               stop: Callable[[], bool] | None = None) -> Added:
    """`realm add` on an exported system: its documents cut with its reader's tokenizer and the
    block length it was trained with, embedded by its own document encoder."""
    from collections import Counter

    from realm_core.bert import load_wordpieces
    from realm_core.blocks import chunk_document

    root = Path(path).resolve()
    manifest = read_manifest(root)
    cfg = PipelineConfig.model_validate(manifest["config"])
    t0 = time.perf_counter()
    documents = DocumentFiles(paths, kind, name, cfg.ingest)
    documents.listing(stop)  # every document read and checked once before anything is written
    corpus = KnowledgeCorpus(root / "knowledge")
    tracked = {}
    if manifest["doc_encoder_hash"] is not None:
        config = EmbedConfig.model_validate({**manifest["doc_embed"], "doc_encoder": str(root / "doc_encoder")})
        tracked[manifest["doc_encoder_hash"]] = ({"spec": "doc_encoder", "embed": manifest["doc_embed"]},
                                                 block_embedder(config))
    backend = load_wordpieces(str(root / "reader"))
    stats: Counter[str] = Counter()
    max_wordpieces = int(manifest["trained_on"]["max_wordpieces"])
    with corpus.lock():  # the version it is built on is the one it replaces
        previous = corpus.current_number()
        version, counts = grow(corpus, documents,
                               lambda doc: list(chunk_document(backend, doc, max_wordpieces, stats)),
                               tracked, remove_docs, remove_sources, reembed_all, log, stop)
    return Added(version.number, previous, counts, time.perf_counter() - t0, sorted(tracked))


def add_to_engine(engine: Answerer, paths: Sequence[str] = (), kind: str = "jsonl",
                  names: str | Sequence[str] | None = None, remove_docs: Sequence[str] = (),
                  remove_sources: Sequence[str] = (), reembed_all: bool = False,
                  log: Callable[[str], None] | None = None, stop: Callable[[], bool] | None = None) -> Added:
    """`realm add` on the corpus `engine` answers from, in this process (the service's POST
    /documents): an exported system's (`bundle_add`) or a store's (`add_documents`), with its own
    encoders and resolver, so that queries go on while it runs (the corpus's lock orders it
    with other changes). The engine's next query follows the new version; `stop` is asked
    between batches."""
    if isinstance(engine, BundleEngine):
        return bundle_add(engine.path, paths, kind, names, remove_docs, remove_sources, log=log,
                          reembed_all=reembed_all, stop=stop)
    if isinstance(engine, QueryEngine):
        own = Resolver(engine.stages.cfg, engine.stages.store, engine.stages.hook, progress=engine.stages.progress)
        return add_documents(own, paths, kind, names, remove_docs, remove_sources, log=log,
                             reembed_all=reembed_all, stop=stop)
    raise TypeError(f"{type(engine).__name__}: expected a QueryEngine or a BundleEngine")
