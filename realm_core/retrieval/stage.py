"""Stages of the retrieval half: embed every block with the document encoder, then build and
switch to a new index version. Together they are `refresh_index` (REALM §3.4 MIPS refresh; the
pretraining loop and the nightly schedule both run it).

Shapes: N blocks, D embedding dim.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from realm_core.bert import files_hash, load_tokenizer, resolve_encoder_dir
from realm_core.config import EmbedConfig, IndexConfig
from realm_core.distributed import resolve_device, resolve_precision
from realm_core.errors import ConfigError, RealmError
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.embed import EncoderRecipe, ShardMap, embed_blocks, load_embeddings
from realm_core.retrieval.encoders import HEAD_FILE, RetrieverEncoder
from realm_core.retrieval.index import MipsIndex
from realm_core.retrieval.versions import KIND, publish_index, set_current
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.store.versions import version_name


def encoder_hash(spec: str) -> str:
    """Content hash of an encoder directory's weights, head and configs."""
    directory = resolve_encoder_dir(spec)
    return files_hash(directory, sorted(p.name for p in directory.iterdir()
                                        if p.suffix in (".safetensors", ".json", ".txt", ".bin")))


def retriever_step(spec: str) -> int:
    """The training step an encoder directory records (0: not trained by us)."""
    import json

    head = resolve_encoder_dir(spec) / HEAD_FILE
    return int(json.loads(head.read_text()).get("step", 0)) if head.is_file() else 0


def run_embed_blocks(store: ArtifactStore, blocks_ref: ArtifactRef, config: EmbedConfig,
                     progress: Progress | None = None, force: bool = False,
                     map_shards: ShardMap | None = None) -> StageResult:
    """Embed every block (cached). `map_shards` runs the shard jobs elsewhere (a Dask cluster);
    the artifact is the same as when this process embeds them."""
    inputs = {"blocks": blocks_ref.content_hash, "encoder": encoder_hash(config.doc_encoder),
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, "embeddings", config, inputs, force)
    if cache.hit:
        return cache.hit
    blocks = store.open(blocks_ref, kind="blocks")
    tokenizer = load_tokenizer(config.doc_encoder)
    block_vocab = blocks.manifest.get("tokenizer", {}).get("vocab_size")
    if block_vocab is not None and block_vocab != tokenizer.vocab_size:
        raise ConfigError(f"{blocks.path}: blocks were cut with a {block_vocab}-word vocabulary, "
                          f"encoder {config.doc_encoder!r} has {tokenizer.vocab_size}")
    encoder = RetrieverEncoder.from_pretrained(config.doc_encoder, config.projection_dim,
                                               config.pooling, config.seed, config.normalize)
    device = resolve_device(config.device)
    encoder.to(device)
    with cache.write() as out:
        summary = embed_blocks(blocks, encoder, tokenizer, out.tmp / "embeddings",
                               max_length=config.max_length, batch_size=config.batch_size,
                               shard_size=config.shard_size, float16=config.float16,
                               progress=progress or NoProgress(),
                               workers=config.workers if device.type == "cpu" else 1,
                               recipe=EncoderRecipe(config.doc_encoder, config.projection_dim,
                                                    config.pooling, config.seed, config.normalize),
                               precision=config.precision, map_shards=map_shards, store_url=store.url,
                               tokenizer_parallel=config.tokenizer_parallel)
        stats = {"blocks": summary["rows"], "dim": summary["dim"], "dtype": summary["dtype"],
                 "device": str(device), "precision": resolve_precision(device, config.precision),
                 "shards": len(summary["shards"]), "retriever_step": retriever_step(config.doc_encoder)}
        out.extra_manifest.update({"embeddings": summary, "stats": stats,
                                   "encoder": {"spec": store.relative(config.doc_encoder), "hash": inputs["encoder"]}})
    return cache.result()


def run_build_index(store: ArtifactStore, embeddings_ref: ArtifactRef, blocks_ref: ArtifactRef,
                    config: IndexConfig, index_store: ArtifactStore | None = None, force: bool = False) -> StageResult:
    """Build index version v<retriever step> from the embeddings and make it current; `force`
    rebuilds the version in place (one atomic swap) even if it exists.

    Versions and the CURRENT pointer live in `index_store` (default: `store`); a pretraining run
    keeps its own there, so two runs never claim the same version number."""
    index_store = index_store or store
    emb = store.open(embeddings_ref, kind="embeddings").made_from(blocks=blocks_ref)
    step = int(emb.manifest["stats"]["retriever_step"])
    existing = None if force else index_store.lookup(KIND, version_name(step))
    if existing is not None:
        if existing.manifest["inputs"]["embeddings"] != embeddings_ref.content_hash:
            raise RealmError(f"{existing.path}: index version {step} exists, built from other "
                             "embeddings; train the retriever further or remove that version")
        set_current(index_store, step)
        return StageResult(existing.ref, True, {"step": step, "blocks": existing.manifest["n_blocks"]})
    blocks = store.open(blocks_ref, kind="blocks")
    vectors = load_embeddings(Path(emb.path) / "embeddings", emb.manifest["embeddings"],
                              blocks.rows("blocks"))  # (N, D)
    train = None
    if "IVF" in config.factory:
        rng = np.random.default_rng(0)
        train = vectors[rng.choice(len(vectors), min(len(vectors), config.train_sample), replace=False)]
    index = MipsIndex.build(vectors.shape[1], config.factory, train_vectors=train,
                            hnsw_ef_search=config.hnsw_ef_search, ivf_nprobe=config.ivf_nprobe)
    index.add(vectors, np.arange(len(vectors), dtype=np.int64))
    ref = publish_index(index_store, step, index, encoder_checkpoint=store.resolve(emb.manifest["encoder"]["spec"]),
                        embeddings_hash=embeddings_ref.content_hash,
                        blocks_hash=blocks_ref.content_hash, replace=force)
    moved = set_current(index_store, step)
    return StageResult(ref, False, {"step": step, "blocks": len(index), "factory": config.factory,
                                    "current": moved})
