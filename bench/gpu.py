"""The GPU path, measured: block embedding (blocks/s) and REALM pretraining steps on this
machine's accelerator, at the demo's MiniLM-L6 shape and the paper preset's BERT-base shape, each
against its peer measured in the same run on the same inputs.

- Embedding: realm's `embed_texts` (length-sorted batches; fp32, bf16 autocast with the
  tokeniser on one thread, and bf16 with the tokeniser's own thread pool, the GPU default)
  against a raw transformers forward of the same model with every batch padded to 288 tokens
  in fp32 (the peer of bench/embed.py; its tokeniser keeps the library's default pool), the
  demo's blocks as exported; vectors compared. The tokeniser alone, both ways, and the encoder loop
  on ids tokenised beforehand split the call into its host and GPU sides.
- Pretraining step: one REALM step (query encoder, MIPS search, trivial-retrieval exclusion,
  relevance recomputed by the document encoder, reader over B x K sequences, marginal
  likelihood, backward, AdamW) against the bare reader forward + backward + AdamW on the very
  same B x K reader inputs (the peer of bench/pretrain_step.py), bf16 autocast for both.

Weights are a random initialisation of each shape with the bundled uncased vocabulary (which is
bert-base-uncased's): throughput does not depend on weight values, and no BERT-base checkpoint
ships offline. The inputs (demo blocks, masked salient-span examples, tokenizer files) are
exported on a machine that has the demo's artifacts, so the GPU machine needs no corpus:

    .venv/bin/python bench/gpu.py --export bench/.work/gpu-inputs      # here (CPU)
    python bench/gpu.py --inputs bench/.work/gpu-inputs                 # on the GPU machine

It writes bench/results/gpu.json (and to --out if given).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")
SHAPES = {
    # name: (BertConfig overrides, reader length, doc length, examples per REALM step)
    "MiniLM-L6 (demo preset shape)": ({}, 288, 288, 32),
    "BERT-base (paper preset shape)": ({"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                        "intermediate_size": 3072}, 384, 288, 16),
}
# ICT per shape: (batch, micro-batch (0: whole batch), query length, block length). MiniLM: the
# demo's batch at whole blocks (README: ICT at 288); BERT-base: the paper preset's 4,096 x 288
# held 256 at a time.
ICT_SHAPES = {"MiniLM-L6 (demo preset shape)": (256, 0, 32, 288),
              "BERT-base (paper preset shape)": (4096, 256, 64, 288)}


def export(directory: Path, preset: str = "demo", overrides: list[str] | None = None) -> None:
    """Write the blocks, masked examples and tokenizer files of `preset` (the demo's: its corpus
    is the gpu preset's too) to `directory`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from realm_core.bert import load_tokenizer, resolve_encoder_dir
    from realm_core.blocks import blocks_tokenizer
    from realm_core.config import BUNDLED_ENCODER, load_config, work_dir
    from realm_core.graph.resolver import Resolver
    from realm_core.spans.masking import iter_examples
    from realm_core.store.artifacts import ArtifactStore

    cfg = load_config(preset, None, overrides or [])
    store = ArtifactStore(work_dir() / "artifacts")
    stages = Resolver(cfg, store)
    blocks, spans = stages.ref("chunk"), stages.ref("spans")
    art = store.open(blocks)
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(art.read_table("blocks", ["block_id", "doc_id", "title", "text"]), directory / "blocks.parquet")
    examples = list(iter_examples(art, store.open(spans), cfg.masking, load_tokenizer(BUNDLED_ENCODER),
                                  encoder=blocks_tokenizer(art, {"chunk.encoder": cfg.chunk.encoder})))
    pq.write_table(pa.Table.from_pylist([vars(e) for e in examples]), directory / "examples.parquet")
    pq.write_table(store.open(spans).read_table("sentences"), directory / "sentences.parquet")  # ICT's queries
    (directory / "tokenizer").mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(resolve_encoder_dir(BUNDLED_ENCODER) / name, directory / "tokenizer" / name)
    print(f"exported {art.rows('blocks'):,} blocks and {len(examples):,} examples to {directory}")


def random_bert(inputs: Path, name: str, overrides: dict[str, Any], seed: int = 0) -> Path:
    """A local HF BERT directory: this shape, random weights, the bundled vocabulary."""
    import torch
    from transformers import BertConfig, BertModel

    directory = inputs / "models" / name.split()[0]
    if not (directory / "model.safetensors").is_file():
        config = BertConfig.from_pretrained(str(inputs / "tokenizer"), **overrides)
        torch.manual_seed(seed)
        model = BertModel(config, add_pooling_layer=False)  # type: ignore[no-untyped-call]
        model.save_pretrained(str(directory), safe_serialization=True)
        for f in TOKENIZER_FILES[:-1]:
            shutil.copy(inputs / "tokenizer" / f, directory / f)
    return directory


def timed(fn: Any, device: Any) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


GPU_DEFAULT = "realm embed_texts, bf16 autocast, tokeniser's own thread pool (the GPU default)"


def embedding_bench(model_dir: Path, titles: list[str], bodies: list[str], device: Any, batch: int) -> dict[str, Any]:
    import torch

    from realm_core.bert import load_tokenizer
    from realm_core.retrieval.embed import (
        embed_texts,
        embed_token_ids,
        tokenize_blocks,
        tokenizer_parallelism,
    )
    from realm_core.retrieval.encoders import RetrieverEncoder

    tok = load_tokenizer(str(model_dir))
    encoder = RetrieverEncoder.from_pretrained(str(model_dir), 128).to(device).eval()

    def raw() -> np.ndarray:
        out = []
        with torch.no_grad(), tokenizer_parallelism(True):  # the tokenizers library's own default
            for i in range(0, len(titles), batch):
                enc = tok(titles[i:i + batch], bodies[i:i + batch], truncation="only_second", max_length=288,
                          padding="max_length", return_tensors="pt")
                hidden = encoder.bert(input_ids=enc["input_ids"].to(device),
                                      attention_mask=enc["attention_mask"].to(device)).last_hidden_state
                out.append(encoder.projection(hidden[:, 0]).float().cpu().numpy())
        return np.concatenate(out)

    def tokenize(parallel: bool) -> list[list[int]]:
        with tokenizer_parallelism(parallel):
            return tokenize_blocks(tok, titles, bodies, 288)  # what embed_texts calls

    ids = tokenize(True)
    results: dict[str, Any] = {}
    vectors: dict[str, np.ndarray] = {}
    runs: dict[str, Callable[[], Any]] = {"raw transformers forward, padded to 288, fp32 (peer)": raw,
            "realm embed_texts, fp32": lambda: embed_texts(encoder, tok, titles, bodies, 288, batch,
                                                           tokenizer_parallel=True),
            "realm embed_texts, bf16 autocast, tokeniser on one thread (TOKENIZERS_PARALLELISM=false)":
                lambda: embed_texts(encoder, tok, titles, bodies, 288, batch, precision="bf16",
                                    tokenizer_parallel=False),
            GPU_DEFAULT:
                lambda: embed_texts(encoder, tok, titles, bodies, 288, batch, precision="bf16",
                                    tokenizer_parallel=True),
            "realm embed_token_ids on ids tokenised beforehand, bf16 autocast":
                lambda: embed_token_ids(encoder, ids, tok.pad_token_id, batch, precision="bf16")}
    for name, fn in runs.items():
        fn()  # warm-up (kernels, allocator)
        box: dict[str, np.ndarray] = {}
        seconds = timed(lambda fn=fn, box=box: box.update(v=fn()), device)
        vectors[name] = box["v"]
        results[name] = {"seconds": seconds, "blocks_per_s": len(titles) / seconds}
    # the tokeniser alone: with the pre-tokenised run above, it splits the bf16 run into its
    # host side and its encoder loop, so a host-bound embedding shows
    tokenize_s = timed(lambda: tokenize(True), device)
    one_thread_s = timed(lambda: tokenize(False), device)
    peer = next(iter(results))
    for name, r in results.items():
        r["ratio"] = r["blocks_per_s"] / results[peer]["blocks_per_s"]
        a, b = vectors[peer], vectors[name]
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        r["min_cosine_to_peer"] = float(cos.min())
    return {"blocks": len(titles), "batch_size": batch, "tokenize_s": tokenize_s,
            "tokenize_blocks_per_s": len(titles) / tokenize_s, "tokenize_one_thread_s": one_thread_s,
            "tokenize_one_thread_blocks_per_s": len(titles) / one_thread_s, "runs": results}


def step_bench(model_dir: Path, blocks: Any, examples: list[Any], device: Any, reader_length: int,
               doc_length: int, batch: int, steps: int, profile: Path | None = None) -> dict[str, Any]:
    import torch
    from peers import (  # bench/pretrain_step.py's peers
        bare_reader_loss,
        doc_encoder_loss,
        query_encoder_loss,
    )

    from realm_core.bert import load_tokenizer
    from realm_core.config import PretrainConfig
    from realm_core.distributed import Placement, Precision
    from realm_core.pretrain.batches import BlockTexts
    from realm_core.pretrain.loop import PretrainData, RealmModels, realm_forward
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.pretrain.refresh import IndexHandle
    from realm_core.retrieval.embed import embed_texts
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.index import MipsIndex
    from realm_core.training import adamw

    precision: Precision = "bf16" if device.type == "cuda" else "fp32"  # CPU bf16 autocast is slow on most CPUs
    place = Placement(device, precision)
    tok = load_tokenizer(str(model_dir))
    config = PretrainConfig(reader_encoder=str(model_dir), top_k=8, reader_length=reader_length,
                            doc_length=doc_length, batch_size=batch, precision=precision)
    models = RealmModels(KnowledgeAugmentedEncoder.from_pretrained(str(model_dir), dropout=config.dropout),
                         RetrieverEncoder.from_pretrained(str(model_dir), 128, dropout=config.dropout),
                         RetrieverEncoder.from_pretrained(str(model_dir), 128, seed=1, dropout=config.dropout))
    for m in models.modules().values():
        m.to(device)
    texts = BlockTexts.from_table(blocks)
    vectors = embed_texts(models.doc_encoder, tok, texts.titles.to_pylist(), texts.texts.to_pylist(), 288, 256,
                          precision=precision)
    index = MipsIndex.build(128)
    index.add(vectors, np.arange(len(vectors)))
    handle = IndexHandle(index, 0)
    for m in models.modules().values():
        m.train()
    data = PretrainData(examples, [], texts, tok)
    optimizer = adamw(list(models.modules().values()), config.learning_rate, config.weight_decay)
    rng = np.random.default_rng(0)
    batches = [[examples[i] for i in rng.choice(len(examples), batch, replace=False)] for _ in range(steps + 2)]

    def realm_step(b: list[Any], placement: Placement = place) -> Any:
        optimizer.zero_grad(set_to_none=True)
        out, reader_batch, _ = realm_forward(models, b, handle, data, config, placement)
        out.loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        return reader_batch

    def host_phases(step: Any) -> tuple[float, float]:
        """Seconds of a step's host side, `realm.search` and `realm.batching` (the regions
        realm_forward labels for torch.profiler), from one step run under a CPU profiler."""
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        events = {e.key: e for e in prof.key_averages()}
        return events["realm.search"].cpu_time_total / 1e6, events["realm.batching"].cpu_time_total / 1e6

    def compute_step(loss: Any) -> None:
        """One forward + backward + AdamW of a peer (its loss closure runs in the step's compute context)."""
        optimizer.zero_grad(set_to_none=True)
        with place.compute():
            value = loss()
        value.backward()
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times: dict[str, list[float]] = {k: [] for k in ("realm", "bare", "doc_encoder", "query_encoder", "search",
                                                     "batching", "realm_with_cudnn_attention")}
    # the same step with cuDNN's fused attention, which PyTorch prefers on Hopper and the
    # project's placement leaves out (realm_core.distributed.attention_kernels)
    with_cudnn = Placement(device, precision, cudnn_attention=True)
    for i, b in enumerate(batches):  # interleaved on the same inputs; the first two are warm-ups
        box: dict[str, Any] = {}
        realm = timed(lambda b=b, box=box: box.update(r=realm_step(b)), device)
        r = box["r"]
        bare = timed(lambda r=r: compute_step(lambda: bare_reader_loss(models.reader, r)), device)
        doc = timed(lambda r=r: compute_step(lambda: doc_encoder_loss(models.doc_encoder, r, data, doc_length,
                                                                      device)), device)
        query = timed(lambda b=b: compute_step(lambda: query_encoder_loss(models.query_encoder, b, tok, device)),
                      device)
        search, batching = host_phases(lambda b=b: realm_step(b))  # one more step, under the profiler
        other = timed(lambda b=b: realm_step(b, with_cudnn), device)
        if i >= 2:
            for k, v in zip(times, (realm, bare, doc, query, search, batching, other), strict=True):
                times[k].append(v)
    if profile is not None:  # where a step's time goes: torch.profiler over three more steps
        profile.parent.mkdir(parents=True, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=activities) as prof:
            for b in batches[:3]:
                timed(lambda b=b: realm_step(b), device)
        table = prof.key_averages()
        sections = [f"torch.profiler, 3 REALM steps of {batch} examples (bf16={precision == 'bf16'})"]
        for key in ["self_cpu_time_total"] + (["self_device_time_total"] if device.type == "cuda" else []):
            sections += [f"\n## sorted by {key}\n", table.table(sort_by=key, row_limit=30)]
        profile.write_text("\n".join(sections) + "\n")
        print(f"wrote {profile}")
    med = {k: float(np.median(v)) for k, v in times.items()}
    unavoidable = med["bare"] + med["doc_encoder"] + med["query_encoder"]
    return {"examples_per_step": batch, "top_k": 8, "reader_length": reader_length, "doc_length": doc_length,
            "dropout": config.dropout, "precision": precision, "steps_timed": steps,
            "realm_step_s": med["realm"], "bare_reader_step_s": med["bare"], "overhead": med["realm"] / med["bare"] - 1.0,
            "doc_encoder_step_s": med["doc_encoder"], "query_encoder_step_s": med["query_encoder"],
            "unavoidable_step_s": unavoidable, "overhead_vs_unavoidable": med["realm"] / unavoidable - 1.0,
            "host_search_s": med["search"], "host_batching_s": med["batching"],
            "realm_step_with_cudnn_attention_s": med["realm_with_cudnn_attention"],
            "realm_examples_per_s": batch / med["realm"],
            "peak_memory_gb": (torch.cuda.max_memory_allocated() / 2**30) if device.type == "cuda" else None}


def tiled_cloze_corpus(blocks: Any, sentences: Any, batch: int) -> Any:
    """The exported blocks' cloze corpus, repeated (new ids) where a batch of distinct rows would
    not fit in it (the demo's 4,140 usable blocks hold the paper's 4,096; a smaller export does
    not). Step time does not depend on which text a row holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from realm_core.retrieval.inverse_cloze import cloze_corpus

    corpus = cloze_corpus(blocks, sentences, 20)
    copies = -(-batch // len(corpus))
    if copies <= 1:
        return corpus
    span = int(pc.max(blocks.column("block_id")).as_py()) + 1

    def shifted(table: Any, k: int) -> Any:
        i = table.schema.get_field_index("block_id")
        return table.set_column(i, "block_id", pc.add(table.column("block_id"), pa.scalar(k * span, pa.int64())))

    return cloze_corpus(pa.concat_tables([shifted(blocks, k) for k in range(copies)]),
                        pa.concat_tables([shifted(sentences, k) for k in range(copies)]), 20)


def ict_bench(model_dir: Path, blocks: Any, sentences: Any, device: Any, shape: tuple[int, int, int, int],
              steps: int) -> dict[str, Any]:
    """ICT steps through the warm-start stage's own loop (`train_inverse_cloze`: batch drawing,
    tokenising, the GradCache step, clipping, AdamW) against two peers on the same batches,
    tokenised and placed on the device beforehand: the loop's step alone (what the loop costs
    beyond it is host work the GPU waited for), and gradient accumulation over the same
    micro-batches, each its own negatives (one forward and one backward: 3 passes to
    GradCache's 4). Also the host side: a batch tokenised by the HF call (pool on, one thread)
    and by the loop's `PaddedBatches`."""
    import tempfile

    import torch

    from realm_core.bert import load_tokenizer
    from realm_core.config import ICTConfig
    from realm_core.distributed import Placement, Precision
    from realm_core.retrieval.embed import tokenizer_parallelism
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.inverse_cloze import (
        in_batch_loss,
        inverse_cloze_batch,
        inverse_cloze_step,
        train_inverse_cloze,
    )
    from realm_core.training import adamw, step_seed

    batch, micro, query_length, block_length = shape
    precision: Precision = "bf16" if device.type == "cuda" else "fp32"
    corpus = tiled_cloze_corpus(blocks, sentences, batch)
    batch = min(batch, len(corpus))  # --max-blocks checks
    micro = micro if micro < batch else 0
    config = ICTConfig(encoder=str(model_dir), batch_size=batch, micro_batch=micro, query_length=query_length,
                       block_length=block_length, steps=steps + 2, checkpoint_every=10_000, precision=precision,
                       device=str(device))
    tok = load_tokenizer(str(model_dir))
    encoders: list[torch.nn.Module] = [RetrieverEncoder.from_pretrained(str(model_dir), config.projection_dim, seed=0,
                                                 dropout=config.dropout).to(device) for _ in range(2)]
    place = Placement(device, precision)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as ckpt:
        curve = train_inverse_cloze(corpus, encoders[0], encoders[1], tok, config, Path(ckpt), placement=place)
    step_peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    seconds = np.diff([0.0] + [p.seconds for p in curve])[2:]  # each step's wall, after two warm-ups

    def tokenised(step: int, parallel: bool) -> tuple[Any, Any]:
        rng = np.random.default_rng(step_seed(config.seed, step))
        queries, titles, contexts = inverse_cloze_batch(corpus, batch, config.keep_sentence_prob, rng)
        with tokenizer_parallelism(parallel):
            q = tok(queries, truncation=True, max_length=query_length, padding=True, return_tensors="pt")
            d = tok(titles, contexts, truncation="only_second", max_length=block_length, padding=True,
                    return_tensors="pt")
        return q, d

    host: dict[str, list[float]] = {"pool": [], "one_thread": []}
    for parallel, key in ((True, "pool"), (False, "one_thread")):
        for step in range(2, steps + 2):
            t0 = time.perf_counter()
            tokenised(step, parallel)
            host[key].append(time.perf_counter() - t0)
    with tokenizer_parallelism(True):  # the loop's own tokenising (PaddedBatches), the peer above
        padded = tokenise_batch(tok, corpus, batch, query_length, block_length, steps)
    optimizer = adamw(encoders, config.learning_rate, config.weight_decay)
    parts = micro or batch
    peer: list[float] = []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for step in range(steps + 2):
        q, d = (x.to(device) for x in tokenised(step, True))

        def accumulate(q: Any = q, d: Any = d) -> None:
            optimizer.zero_grad(set_to_none=True)
            for s in range(0, batch, parts):
                with place.compute():
                    loss, _ = in_batch_loss(encoders[0](q["input_ids"][s:s + parts], q["attention_mask"][s:s + parts]),
                                             encoders[1](d["input_ids"][s:s + parts], d["attention_mask"][s:s + parts]))
                loss.backward()
            torch.nn.utils.clip_grad_norm_([p for e in encoders for p in e.parameters()], config.max_grad_norm)
            optimizer.step()

        t = timed(accumulate, device)
        if step >= 2:
            peer.append(t)
    peer_peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    # the loop's step alone (GradCache, clip, AdamW) on the same batches, tokenised and on the
    # device beforehand: what the loop costs beyond it is host work the GPU waited for
    alone: list[float] = []
    for step in range(steps + 2):
        q, d = (x.to(device) for x in tokenised(step, True))

        def step_alone(q: Any = q, d: Any = d, step: int = step) -> None:
            torch.manual_seed(step_seed(config.seed, step, stream=1))
            optimizer.zero_grad(set_to_none=True)
            with place.compute():
                loss, _ = inverse_cloze_step(encoders[0], encoders[1], q, d, micro)
            torch.nn.utils.clip_grad_norm_([p for e in encoders for p in e.parameters()], config.max_grad_norm)
            optimizer.step()
            loss.item()

        t = timed(step_alone, device)
        if step >= 2:
            alone.append(t)
    step_s, peer_s = float(np.median(seconds)), float(np.median(peer))
    return {"batch": batch, "micro_batch": micro, "query_length": query_length, "block_length": block_length,
            "precision": precision, "dropout": config.dropout, "steps_timed": steps, "step_s": step_s,
            "examples_per_s": batch / step_s, "accumulation_step_s": peer_s, "step_vs_accumulation": step_s / peer_s,
            "step_alone_s": float(np.median(alone)),
            # tokenising a batch by the HF call (the loop's way before PaddedBatches), and by PaddedBatches
            "tokenize_s": float(np.median(host["pool"])), "tokenize_one_thread_s": float(np.median(host["one_thread"])),
            "tokenize_padded_s": padded["padded_batches_s"],
            "first_loss": curve[0].loss, "last_loss": curve[-1].loss,
            "peak_memory_gb": step_peak, "accumulation_peak_memory_gb": peer_peak}


def tokenise_batch(tok: Any, corpus: Any, batch: int, query_length: int, block_length: int,
                   repeats: int) -> dict[str, Any]:
    """One ICT batch tokenised by the HF call (the peer) and by `PaddedBatches`, interleaved."""
    import torch

    from realm_core.retrieval.inverse_cloze import PaddedBatches, inverse_cloze_batch

    queries, titles, contexts = inverse_cloze_batch(corpus, batch, 0.1, np.random.default_rng(0))
    padded_q, padded_d = PaddedBatches(tok, query_length), PaddedBatches(tok, block_length, "only_second")
    runs: dict[str, Callable[[], Any]] = {"hf": lambda: (tok(queries, truncation=True, max_length=query_length, padding=True, return_tensors="pt"),
                           tok(titles, contexts, truncation="only_second", max_length=block_length, padding=True,
                               return_tensors="pt")),
            "padded": lambda: (padded_q(queries), padded_d(list(zip(titles, contexts, strict=True))))}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, Any] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            outputs[name] = fn()
            seconds[name].append(time.perf_counter() - t0)
    same = all(torch.equal(a[k], b[k]) for a, b in zip(outputs["hf"], outputs["padded"], strict=True)
               for k in ("input_ids", "attention_mask"))
    hf_s, padded_s = float(np.median(seconds["hf"])), float(np.median(seconds["padded"]))
    return {"batch": batch, "query_length": query_length, "block_length": block_length, "hf_call_s (peer)": hf_s,
            "padded_batches_s": padded_s, "speedup": hf_s / padded_s, "identical_ids_and_masks": same}


def tokenise_bench(inputs: Path, repeats: int = 3) -> None:
    """The ICT loop's host side alone, on this host: one batch of each ICT shape tokenised by the
    HF tokeniser call (the peer) and by `PaddedBatches` (the loop's), the tokeniser's pool on as
    the loop turns it on for an accelerator; ids and masks compared. Writes
    bench/results/ict_tokenise.json."""
    import os

    import pyarrow.parquet as pq
    from peers import write_result

    from realm_core.bert import load_tokenizer

    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    blocks, sentences = pq.read_table(inputs / "blocks.parquet"), pq.read_table(inputs / "sentences.parquet")
    tok = load_tokenizer(str(inputs / "tokenizer"))
    result: dict[str, Any] = {"host": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                              "repeats": repeats, "shapes": {}}
    for shape, (batch, _, query_length, block_length) in ICT_SHAPES.items():
        r = tokenise_batch(tok, tiled_cloze_corpus(blocks, sentences, batch), batch, query_length, block_length,
                           repeats)
        result["shapes"][shape] = r
        print(f"{shape} | tokenising an ICT batch of {batch} x {block_length}: HF call {r['hf_call_s (peer)']:.3f} s "
              f"(peer), PaddedBatches {r['padded_batches_s']:.3f} s: {r['speedup']:.2f}x; "
              f"identical: {r['identical_ids_and_masks']}")
    write_result("ict_tokenise", result)


def measure(inputs: Path, steps: int, out: Path | None, max_blocks: int | None, batch: int | None,
            with_profile: bool = False, only_ict: bool = False, shapes: list[str] | None = None) -> None:
    import pyarrow.parquet as pq
    import torch

    from realm_core.distributed import resolve_device
    from realm_core.spans.masking import MaskedExample

    device = resolve_device("auto")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    blocks = pq.read_table(inputs / "blocks.parquet")
    examples = [MaskedExample(**r) for r in pq.read_table(inputs / "examples.parquet").to_pylist()]
    if max_blocks is not None:  # a quick check of the script itself, not a measurement
        blocks = blocks.slice(0, max_blocks)
        examples = [e for e in examples if e.block_id < max_blocks]
    sentences = pq.read_table(inputs / "sentences.parquet")
    titles, bodies = blocks.column("title").to_pylist(), blocks.column("text").to_pylist()
    result: dict[str, Any] = {"device": name, "torch": torch.__version__, "shapes": {}}
    for shape, (overrides, reader_length, doc_length, per_step) in SHAPES.items():
        if shapes and not any(shape.startswith(prefix) for prefix in shapes):
            continue
        model_dir = random_bert(inputs, shape, overrides)
        profile = out.parent / f"profile_{shape.split()[0]}.txt" if (out and with_profile) else None
        # a --max-blocks check runs ICT small: 16 x 64 in micro-batches of 8
        ict_shape = ICT_SHAPES[shape] if max_blocks is None else (16, 8, 32, 64)
        ict = ict_bench(model_dir, blocks, sentences, device, ict_shape, min(steps, 4))
        print(f"{shape} | ICT step ({ict['batch']} x {ict['block_length']}, micro-batch {ict['micro_batch']}, "
              f"{ict['precision']}) {ict['step_s']:.3f} s ({ict['examples_per_s']:,.0f} examples/s); the step alone on "
              f"batches on the device {ict['step_alone_s']:.3f} s; gradient accumulation on the same batches "
              f"{ict['accumulation_step_s']:.3f} s: {ict['step_vs_accumulation']:.2f}x; tokenising a batch "
              f"{ict['tokenize_s']:.3f} s with the pool, {ict['tokenize_one_thread_s']:.3f} s on one thread; peak "
              f"{ict['peak_memory_gb'] or 0:.1f} GB")
        result["shapes"][shape] = {"ict_step": ict}
        if not only_ict:
            emb = embedding_bench(model_dir, titles, bodies, device, 256)
            step = step_bench(model_dir, blocks, examples, device, reader_length, doc_length, batch or per_step,
                              steps, profile)
            result["shapes"][shape].update(embedding=emb, pretrain_step=step)
            print_embedding_and_step(shape, emb, step)
        # written after each shape, so a run cut short keeps what it measured
        text = json.dumps(result, indent=2) + "\n"
        keep = [] if (max_blocks is not None or only_ict) else [ROOT / "bench" / "results" / "gpu.json"]
        for target in [*keep, *([out] if out else [])]:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {target}")


def print_embedding_and_step(shape: str, emb: dict[str, Any], step: dict[str, Any]) -> None:
    for run, r in emb["runs"].items():
        print(f"{shape} | {run}: {r['blocks_per_s']:,.0f} blocks/s, {r['ratio']:.2f}x, "
              f"min cosine {r['min_cosine_to_peer']:.4f}")
    print(f"{shape} | the tokeniser alone: {emb['tokenize_blocks_per_s']:,.0f} blocks/s with its thread pool, "
          f"{emb['tokenize_one_thread_blocks_per_s']:,.0f} on one thread")
    print(f"{shape} | REALM step {step['realm_step_s']:.3f} s ({step['realm_examples_per_s']:.1f} examples/s) "
          f"vs bare reader {step['bare_reader_step_s']:.3f} s: overhead {100 * step['overhead']:.0f}%; vs the "
          f"compute it cannot avoid {step['unavoidable_step_s']:.3f} s (reader + document encoder + query "
          f"encoder): {100 * step['overhead_vs_unavoidable']:+.0f}%; CPU side: search "
          f"{step['host_search_s']:.3f} s, batching {step['host_batching_s']:.3f} s; the step with cuDNN "
          f"attention {step['realm_step_with_cudnn_attention_s']:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", type=Path, help="write the demo inputs to this folder and stop")
    ap.add_argument("--export-preset", default="demo", help="the preset whose corpus --export writes")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="with --export: stage.field=value")
    ap.add_argument("--inputs", type=Path, default=ROOT / "bench" / ".work" / "gpu-inputs")
    ap.add_argument("--steps", type=int, default=10, help="timed pretraining steps (after two warm-up steps)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--max-blocks", type=int, help="check the script on the first N blocks (no measurement)")
    ap.add_argument("--batch", type=int, help="examples per pretraining step (default: per shape)")
    ap.add_argument("--profile", action="store_true",
                    help="also write a torch.profiler table of three REALM steps per shape beside --out")
    ap.add_argument("--tokenise", action="store_true",
                    help="time the ICT loop's tokenising alone on this host (bench/results/ict_tokenise.json)")
    ap.add_argument("--shape", dest="shapes", action="append", default=[],
                    help="measure only the shapes whose name starts with this (MiniLM, BERT-base); repeatable")
    ap.add_argument("--only-ict", action="store_true",
                    help="the ICT steps alone (writes only --out, not bench/results/gpu.json)")
    args = ap.parse_args()
    if args.export:
        export(args.export, args.export_preset, args.overrides)
    elif args.tokenise:
        tokenise_bench(args.inputs)
    else:
        measure(args.inputs, args.steps, args.out, args.max_blocks, args.batch, args.profile, args.only_ict,
                args.shapes)


if __name__ == "__main__":
    main()
