"""Pretraining step cost: one full REALM step (query encoder, index search, trivial-retrieval
exclusion, relevance recomputed with the document encoder, reader over B x K sequences,
marginal likelihood, backward) against the bare reader forward + backward on the very same
B x K reader inputs with a plain mean token loss and no retrieval: the peer, measured in this
run. The overhead is the retriever's share of a step, and it depends on the shapes.

A recompute step also runs two encoders that REALM cannot skip (§3.4 recomputes p(z|x) with
gradient): so the step is also set against the compute it cannot avoid on the same inputs,
timed interleaved with it: the bare reader forward + backward on the B x K reader rows, the
document encoder forward + backward on the step's B x (k-1) retrieved blocks, and the query
encoder forward + backward on its B queries (`unavoidable_step_s`); what is left (index search,
batching, marginalisation, bookkeeping) is `overhead_vs_unavoidable`, bound at +20%. Both
shapes are timed on the demo corpus with its ICT encoders and index:

- demo: the demo preset's sizes (k=4 with the null block, reader 128, blocks cut to 128,
  queries of 64 wordpieces);
- paper: REALM's per-example shapes (k=8, reader 384, whole 288-wordpiece blocks re-embedded,
  queries of 96), with the demo's batch of 8 examples (a step's cost is linear in the batch).

    .venv/bin/python bench/pretrain_step.py [--steps 5] [--root work/artifacts]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import torch
from peers import bare_reader_loss, doc_encoder_loss, query_encoder_loss, write_result

from realm_core.bert import load_tokenizer
from realm_core.config import load_config, work_dir
from realm_core.config.training import PretrainConfig
from realm_core.graph.resolver import Resolver
from realm_core.pretrain.batches import BlockTexts
from realm_core.pretrain.loop import PretrainData, RealmModels, realm_forward
from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
from realm_core.pretrain.refresh import IndexHandle
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.versions import load_index
from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
from realm_core.spans.masking import MaskedExample, iter_examples
from realm_core.store.artifacts import ArtifactStore
from realm_core.training import adamw


def time_modes(models: RealmModels, optimizer: torch.optim.Optimizer, handle: IndexHandle, data: PretrainData,
               config: PretrainConfig, batches: list[list[MaskedExample]]) -> dict[str, list[float]]:
    """Seconds of each timed step: REALM with relevance recomputed, the bare reader on that
    step's own reader inputs, and REALM with the index's vectors (after a warm-up of each)."""

    def realm_step(batch: list[MaskedExample], config: PretrainConfig = config) -> Any:
        optimizer.zero_grad()
        out, reader_batch, _ = realm_forward(models, batch, handle, data, config)
        out.loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        return reader_batch

    def bare_reader_step(reader_batch: Any) -> None:
        optimizer.zero_grad()
        bare_reader_loss(models.reader, reader_batch).backward()
        optimizer.step()

    def doc_encoder_step(reader_batch: Any) -> None:
        optimizer.zero_grad()
        doc_encoder_loss(models.doc_encoder, reader_batch, data, config.doc_length).backward()
        optimizer.step()

    def query_encoder_step(batch: list[MaskedExample]) -> None:
        optimizer.zero_grad()
        query_encoder_loss(models.query_encoder, batch, data.tokenizer).backward()
        optimizer.step()

    stale = config.model_copy(update={"relevance": "index"})
    first = realm_step(batches[0])  # warm-ups
    bare_reader_step(first)
    doc_encoder_step(first)
    query_encoder_step(batches[0])
    realm_step(batches[0], stale)
    times: dict[str, list[float]] = {"recompute": [], "index": [], "bare": [], "doc_encoder": [],
                                     "query_encoder": [], "unavoidable": []}
    for batch in batches[1:]:  # interleaved, so a noisy neighbour slows all of them alike
        t0 = time.perf_counter()
        reader_batch = realm_step(batch)
        t1 = time.perf_counter()
        bare_reader_step(reader_batch)  # the peer: the very same B x K reader inputs
        t2 = time.perf_counter()
        doc_encoder_step(reader_batch)  # ... the same retrieved blocks
        t3 = time.perf_counter()
        query_encoder_step(batch)  # ... the same queries
        t4 = time.perf_counter()
        realm_step(batch, stale)
        t5 = time.perf_counter()
        times["recompute"].append(t1 - t0)
        times["bare"].append(t2 - t1)
        times["doc_encoder"].append(t3 - t2)
        times["query_encoder"].append(t4 - t3)
        times["unavoidable"].append(t4 - t1)  # reader + document encoder + query encoder, same inputs
        times["index"].append(t5 - t4)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each (after one warm-up step)")
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_config("demo")
    p = cfg.pretrain
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    stages = Resolver(cfg, store)  # the pipeline's index: built with the ICT document encoder
    stages.run("index")
    blocks, spans, ict = stages.ref("chunk"), stages.ref("spans"), stages.ref("ict")
    index, _ = load_index(store, cfg.ict.steps)
    tok = load_tokenizer(p.reader_encoder)
    art = store.open(blocks)
    block_texts = BlockTexts.from_table(art.read_table("blocks", ["block_id", "doc_id", "title", "text"]))
    models = RealmModels(KnowledgeAugmentedEncoder.from_pretrained(p.reader_encoder, dropout=p.dropout),
                         RetrieverEncoder.from_pretrained(query_encoder_dir(ict), dropout=p.dropout),
                         RetrieverEncoder.from_pretrained(doc_encoder_dir(ict), dropout=p.dropout))
    optimizer = adamw([models.reader, models.query_encoder, models.doc_encoder], p.learning_rate, p.weight_decay)
    handle = IndexHandle(index, cfg.ict.steps)
    shapes = {"demo": (p, cfg.masking),
              "paper": (p.model_copy(update={"top_k": 8, "reader_length": 384, "doc_length": 288}),
                        cfg.masking.model_copy(update={"query_length": 96}))}
    measured: dict[str, dict[str, Any]] = {}
    result = {"preset": "demo", "machine": platform.machine(), "threads": torch.get_num_threads(),
              "steps": args.steps, "shapes": measured}
    for name, (config, masking) in shapes.items():
        examples = list(iter_examples(art, store.open(spans), masking, tok))
        data = PretrainData(examples, [], block_texts, tok)
        rng = np.random.default_rng(0)
        batches = [[examples[i] for i in rng.choice(len(examples), config.batch_size, replace=False)]
                   for _ in range(args.steps + 1)]
        times = time_modes(models, optimizer, handle, data, config, batches)
        med = {k: float(np.median(v)) for k, v in times.items()}
        shape: dict[str, Any] = {"batch_size": config.batch_size, "top_k": config.top_k, "reader_length": config.reader_length,
                 "doc_length": config.doc_length, "query_length": masking.query_length,
                 "bare_reader_step_s": med["bare"], "doc_encoder_step_s": med["doc_encoder"],
                 "query_encoder_step_s": med["query_encoder"], "unavoidable_step_s": med["unavoidable"],
                 "modes": {mode: {"step_s": med[mode], "overhead": med[mode] / med["bare"] - 1.0,
                                  "overhead_vs_unavoidable": med[mode] / med["unavoidable"] - 1.0}
                           for mode in ("recompute", "index")}, "times": times}
        measured[name] = shape
        for mode in ("recompute", "index"):
            print(f"{name} shapes, REALM step, relevance={mode}: {med[mode]:.2f} s vs bare reader "
                  f"{med['bare']:.2f} s: overhead {100 * shape['modes'][mode]['overhead']:.0f}%; vs the compute it "
                  f"cannot avoid ({med['unavoidable']:.2f} s: reader + document encoder + query encoder): "
                  f"{100 * shape['modes'][mode]['overhead_vs_unavoidable']:+.0f}%")
    write_result("pretrain_step", result)


if __name__ == "__main__":
    main()
