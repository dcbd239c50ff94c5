"""bf16 autocast against fp32 on this machine's CPU, for the demo preset's `precision: auto`.

The peer is the same code in fp32, measured in this run, interleaved with the bf16 rounds on the
same inputs (the median of `--rounds` each), so that the ratio holds on a shared, noisy machine:

- forward (inference_mode), the bundled MiniLM's encoder as the index embeds blocks: sequences/s
  at 128, 288 and 384 tokens, and the smallest cosine between a block's fp32 and bf16 vector;
- a training step of the open-QA span reader (forward, backward, AdamW) at the demo's
  gold-paragraph shape (16 rows of 384 wordpieces), seconds a step, and the largest difference
  between the two precisions' span scores before the step.

`auto` resolves to bf16 only where the CPU computes bf16 natively (AVX512-BF16 or AMX; see
`realm_core.distributed.native_bf16`); on another CPU this benchmark still runs and says so.
Writes bench/results/cpu_precision.json, or `--name`'s file (README has a table for a CPU with
native bf16 and one for a CPU without, `--name cpu_precision_avx2`).

    .venv/bin/python bench/cpu_precision.py [--rounds 3] [--name cpu_precision_avx2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

from realm_core.config import BUNDLED_ENCODER
from realm_core.distributed import Placement, native_bf16


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def forward_rate(encoder: Any, ids: Any, mask: Any, place: Placement, repeats: int) -> tuple[float, Any]:
    import torch

    with torch.inference_mode(), place.compute():
        out = encoder(ids, mask).float()  # warm: the first call allocates
        t0 = time.perf_counter()
        for _ in range(repeats):
            out = encoder(ids, mask).float()
        return ids.shape[0] * repeats / (time.perf_counter() - t0), out


def train_step_seconds(reader: Any, batch: tuple[Any, ...], place: Placement, steps: int) -> float:
    import torch

    optimizer = torch.optim.AdamW(reader.parameters(), lr=1e-5)
    times = []
    for _ in range(steps + 1):  # the first step (allocation) is not counted
        t0 = time.perf_counter()
        with place.compute():
            scores = reader(*batch)  # (1, K, T, L)
        loss = -torch.logsumexp(scores[torch.isfinite(scores)], 0)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved fp32/bf16 rounds; medians reported")
    parser.add_argument("--batch", type=int, default=16, help="sequences a forward")
    parser.add_argument("--repeats", type=int, default=3, help="forwards a round")
    parser.add_argument("--train-rows", type=int, default=16, help="span reader rows a training step")
    parser.add_argument("--train-length", type=int, default=384)
    parser.add_argument("--train-steps", type=int, default=2, help="timed steps a round")
    parser.add_argument("--name", default="cpu_precision",
                        help="results file bench/results/NAME.json (README renders cpu_precision, from an "
                             "AVX512-BF16 CPU, and cpu_precision_avx2, from one without native bf16)")
    args = parser.parse_args()

    import torch

    from realm_core.bert import resolve_encoder_dir
    from realm_core.openqa.span_reader import SpanReader
    from realm_core.retrieval.encoders import RetrieverEncoder

    cpu = torch.device("cpu")
    places = {"fp32": Placement(cpu, "fp32"), "bf16": Placement(cpu, "bf16")}
    native = native_bf16(cpu)
    print(f"{cpu_model()}, {torch.get_num_threads()} threads; native bf16: {native}; "
          f"precision auto -> {Placement(cpu, 'auto').precision}", flush=True)
    encoder = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 128, "cls", 0).eval()
    gen = torch.Generator().manual_seed(0)
    forward: dict[str, Any] = {}
    for length in (128, 288, 384):
        ids = torch.randint(1000, 29000, (args.batch, length), generator=gen)
        mask = torch.ones_like(ids)
        rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
        vectors: dict[str, Any] = {}
        for r in range(args.rounds):
            for name in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
                rate, vectors[name] = forward_rate(encoder, ids, mask, places[name], args.repeats)
                rates[name].append(rate)
        cosine = torch.nn.functional.cosine_similarity(vectors["fp32"], vectors["bf16"], dim=-1)
        row = {"fp32_seq_per_s": round(statistics.median(rates["fp32"]), 1),
               "bf16_seq_per_s": round(statistics.median(rates["bf16"]), 1),
               "min_cosine_fp32_bf16": round(float(cosine.min()), 5)}
        row["bf16_vs_fp32"] = round(row["bf16_seq_per_s"] / row["fp32_seq_per_s"], 2)
        forward[str(length)] = row
        print(f"forward at {length}: {row}", flush=True)

    reader_dir = str(resolve_encoder_dir(BUNDLED_ENCODER))
    t, k = args.train_length, args.train_rows
    ids = torch.randint(1000, 29000, (1, k, t), generator=gen)
    mask = torch.ones_like(ids)
    body = torch.zeros(1, k, t, dtype=torch.bool)
    body[..., 40:t - 1] = True  # a question of 38 wordpieces and [SEP]s around the block
    types = body.long()
    batch = (ids, mask, body, types)
    steps: dict[str, list[float]] = {"fp32": [], "bf16": []}
    scores: dict[str, Any] = {}
    for r in range(args.rounds):
        for name in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
            reader = SpanReader.from_pretrained(reader_dir, 10, dropout=0.0, seed=0).train()
            with torch.no_grad(), places[name].compute():
                scores[name] = reader(*batch)
            steps[name].append(train_step_seconds(reader, batch, places[name], args.train_steps))
    finite = torch.isfinite(scores["fp32"])
    train = {"rows": k, "length": t, "fp32_step_s": round(statistics.median(steps["fp32"]), 3),
             "bf16_step_s": round(statistics.median(steps["bf16"]), 3),
             "max_abs_span_score_diff": round(float((scores["fp32"][finite] - scores["bf16"][finite]).abs().max()), 4)}
    train["bf16_vs_fp32"] = round(train["fp32_step_s"] / train["bf16_step_s"], 2)
    print(f"span reader training step: {train}", flush=True)
    write_result(args.name, {
        "machine": {"cpu": cpu_model(), "threads": torch.get_num_threads(), "native_bf16": native,
                    "auto_resolves_to": Placement(cpu, "auto").precision, "torch": torch.__version__},
        "peer": "the same code in fp32, interleaved in this run on the same inputs",
        "rounds": args.rounds, "batch": args.batch, "forward": forward, "span_reader_train_step": train})


if __name__ == "__main__":
    main()
