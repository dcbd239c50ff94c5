"""REALM's paper run projected to GPU-hours: a calculation from the paper preset's shapes, not a
measurement. Every stage's work is counted in floating-point operations of its transformer
passes (the usual count: 2 per multiply-add of the dense layers and attention; backward costs
twice the forward, so training is 3x), then divided by a sustained GPU rate that is an
assumption, given on the command line and written down with the result.

When bench/gpu.py has run on a GPU (bench/results/gpu.json), the GPU-hours its measured
blocks/s and examples/s give are written beside the calculation.

    .venv/bin/python bench/projection.py [--tflops 989] [--utilization 0.4] [--gpus 1 8 64]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from gpu import GPU_DEFAULT
from peers import write_result
from scaling import REALM_BLOCKS

from realm_core.config import load_config


@dataclass(frozen=True)
class Shape:
    """A BERT encoder's dimensions (from its config.json)."""

    name: str
    layers: int
    hidden: int
    intermediate: int

    def forward_flops(self, tokens: int) -> float:
        """One forward pass over a sequence of `tokens`: per layer the Q, K, V and output
        projections (4 h^2 multiply-adds a token), the feed-forward (2 h i) and attention's
        scores and weighted values (2 T h)."""
        per_token = self.layers * (4 * self.hidden ** 2 + 2 * self.hidden * self.intermediate
                                   + 2 * tokens * self.hidden)
        return 2.0 * per_token * tokens


BERT_BASE = Shape("bert-base-uncased", 12, 768, 3072)


def realm_step_flops(shape: Shape, batch: int, top_k: int, reader: int, doc: int, query: int) -> float:
    """One REALM training step (forward + backward = 3 forwards): the reader over B x K
    sequences, the document encoder re-embedding B x (K-1) retrieved blocks with gradient
    (relevance `recompute`) and the query encoder over B queries."""
    return 3.0 * batch * (top_k * shape.forward_flops(reader) + (top_k - 1) * shape.forward_flops(doc)
                          + shape.forward_flops(query))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tflops", type=float, default=989.0,
                    help="peak dense bf16 TFLOP/s of one GPU (default: an H100 SXM's datasheet figure)")
    ap.add_argument("--utilization", type=float, default=0.4,
                    help="assumed share of that peak sustained by training and embedding")
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64])
    args = ap.parse_args()
    cfg = load_config("paper")
    p, block = cfg.pretrain, cfg.chunk.max_wordpieces
    rate = args.tflops * 1e12 * args.utilization  # FLOP/s per GPU, assumed
    embed = REALM_BLOCKS * BERT_BASE.forward_flops(block)
    # forward + backward (3 forwards' worth), and in micro-batches a first forward without a graph
    micro = 0 < cfg.ict.micro_batch < cfg.ict.batch_size
    ict = cfg.ict.steps * cfg.ict.batch_size * (4.0 if micro else 3.0) * (
        BERT_BASE.forward_flops(cfg.ict.query_length) + BERT_BASE.forward_flops(cfg.ict.block_length))
    step = realm_step_flops(BERT_BASE, p.batch_size, p.top_k, p.reader_length, p.doc_length, cfg.masking.query_length)
    refreshes = p.steps // p.refresh_every
    work = {
        "embed the corpus once (first index)": embed,
        f"ICT warm start ({cfg.ict.steps:,} steps x {cfg.ict.batch_size:,}"
        f"{f' in micro-batches of {cfg.ict.micro_batch}' if micro else ''})": ict,
        f"REALM pretraining ({p.steps:,} steps x {p.batch_size})": p.steps * step,
        f"index refreshes ({refreshes} x the corpus, every {p.refresh_every} steps)": refreshes * embed,
    }
    stages = {name: {"pflop": flops / 1e15, "gpu_hours": flops / rate / 3600,
                     "hours": {str(g): flops / rate / 3600 / g for g in args.gpus}} for name, flops in work.items()}
    total = sum(work.values())
    result: dict[str, object] = {
        "blocks": REALM_BLOCKS, "block_wordpieces": block, "encoder": BERT_BASE.__dict__,
        "assumption": {"peak_tflops": args.tflops, "utilization": args.utilization, "sustained_tflops": rate / 1e12},
        "shapes": {"batch": p.batch_size, "top_k": p.top_k, "reader": p.reader_length, "doc": p.doc_length,
                   "query": cfg.masking.query_length},
        "stages": stages, "total": {"pflop": total / 1e15, "gpu_hours": total / rate / 3600,
                                    "hours": {str(g): total / rate / 3600 / g for g in args.gpus}},
    }
    gpu = ROOT / "bench" / "results" / "gpu.json"
    if gpu.is_file():  # measured on a GPU: these replace the assumed rate where they apply
        bert = json.loads(gpu.read_text())["shapes"]["BERT-base (paper preset shape)"]
        blocks_per_s = bert["embedding"]["runs"][GPU_DEFAULT]["blocks_per_s"]  # the embed stage's default
        examples_per_s = bert["pretrain_step"]["realm_examples_per_s"]
        embed_h = REALM_BLOCKS / blocks_per_s / 3600
        result["measured_on_gpu"] = {
            "device": json.loads(gpu.read_text())["device"], "blocks_per_s": blocks_per_s,
            "realm_examples_per_s": examples_per_s,
            "gpu_hours": {"embed the corpus once": embed_h,
                          "REALM pretraining": p.steps * p.batch_size / examples_per_s / 3600,
                          "index refreshes": refreshes * embed_h}}
        ict_step = bert.get("ict_step")  # runs of bench/gpu.py before the ICT section have none
        if ict_step and (ict_step["batch"], ict_step["block_length"]) == (cfg.ict.batch_size, cfg.ict.block_length):
            measured = result["measured_on_gpu"]
            assert isinstance(measured, dict)
            measured["ict_step_s"] = ict_step["step_s"]
            measured["gpu_hours"]["ICT warm start"] = cfg.ict.steps * ict_step["step_s"] / 3600
    for name, s in stages.items():
        print(f"{name}: {s['pflop']:,.0f} PFLOP, {s['gpu_hours']:,.0f} GPU-hours")
    print(f"total: {total / 1e15:,.0f} PFLOP = {total / rate / 3600:,.0f} GPU-hours at an assumed "
          f"{rate / 1e12:,.0f} TFLOP/s per GPU")
    write_result("projection", result)


if __name__ == "__main__":
    main()
