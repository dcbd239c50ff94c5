"""Block embedding benchmark: realm's `embed_texts` (length-sorted batches padded to their own
longest block, inference_mode) against a raw transformers forward of the same model on the same
blocks with every batch padded to 288 tokens (what a naive loop does), in this one run. Both
produce the same vectors (checked); blocks/s and the ratio go to bench/results/embed.json.

Second, parallel over shards: `embed_blocks` with one process using every core against
`--workers` processes (cores / workers threads each, encoder loading and process start-up
included), same blocks, same shards; vectors checked equal.

    .venv/bin/python bench/embed.py [--blocks 600] [--batch-size 32] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER, load_config
from realm_core.graph.resolver import Resolver
from realm_core.retrieval.embed import EncoderRecipe, embed_blocks, embed_texts, load_embeddings
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.store.artifacts import ArtifactStore

WORK = ROOT / "bench" / ".work" / "embed"


def raw_forward(encoder: RetrieverEncoder, tokenizer: object, titles: list[str], bodies: list[str],
                batch_size: int) -> np.ndarray:
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(titles), batch_size):
            enc = tokenizer(titles[i:i + batch_size], bodies[i:i + batch_size],  # type: ignore[operator]
                            truncation="only_second", max_length=288, padding="max_length",
                            return_tensors="pt")
            hidden = encoder.bert(input_ids=enc["input_ids"],
                                  attention_mask=enc["attention_mask"]).last_hidden_state
            out.append(encoder.projection(hidden[:, 0]).numpy())
    return np.concatenate(out)


def shards_benchmark(store: ArtifactStore, sample: object, encoder: RetrieverEncoder, tokenizer: object,
                     args: argparse.Namespace) -> dict[str, object]:
    """embed_blocks with one process against --workers processes over the same shards."""
    import shutil

    rows = [{"block_id": i, "doc_id": r["doc_id"], "title": r["title"], "text": r["text"],
             "n_wordpieces": r["n_wordpieces"], "char_start": r["char_start"], "char_end": r["char_end"]}
            for i, r in enumerate(sample.to_pylist())]  # type: ignore[attr-defined]
    key = f"sample-{len(rows)}"
    if store.lookup("blocks", key) is None:
        with store.write("blocks", key, config={}, config_hash=key, inputs={}) as w:
            w.table("blocks").write(rows)
    blocks = store.lookup("blocks", key)
    shard_size = -(-len(rows) // (2 * args.workers))  # two shards per worker
    cores = os.cpu_count() or 1
    timings, vectors = {}, {}
    for name, workers in (("one_process", 1), ("parallel", args.workers)):
        directory = WORK / f"shards-{name}"
        shutil.rmtree(directory, ignore_errors=True)
        t0 = time.perf_counter()
        summary = embed_blocks(blocks, encoder, tokenizer, directory, max_length=288,
                               batch_size=args.batch_size, shard_size=shard_size, workers=workers,
                               recipe=EncoderRecipe(BUNDLED_ENCODER, 128, "cls", 0))
        timings[name] = time.perf_counter() - t0
        vectors[name] = load_embeddings(directory, summary, len(rows))
    diff = float(np.abs(vectors["one_process"] - vectors["parallel"]).max())
    assert diff < 1e-3, f"parallel shards disagree by {diff}"
    return {"workers": args.workers, "shards": -(-len(rows) // shard_size), "blocks": len(rows),
            "one_process": {"threads": cores, "seconds": round(timings["one_process"], 2),
                            "blocks_per_s": round(len(rows) / timings["one_process"], 1)},
            "parallel": {"threads": max(1, cores // args.workers), "seconds": round(timings["parallel"], 2),
                         "blocks_per_s": round(len(rows) / timings["parallel"], 1)},
            "ratio": round(timings["one_process"] / timings["parallel"], 2), "max_abs_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=600, help="blocks sampled from the demo corpus")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes of the parallel run")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_config("demo")
    store = ArtifactStore(WORK / "artifacts")
    blocks = Resolver(cfg, store).ref("chunk")
    table = store.open(blocks).read_table("blocks")
    rng = np.random.default_rng(0)
    rows = sorted(rng.choice(table.num_rows, size=min(args.blocks, table.num_rows), replace=False))
    sample = table.take(rows)
    titles, bodies = sample.column("title").to_pylist(), sample.column("text").to_pylist()
    tokenizer = load_tokenizer(BUNDLED_ENCODER)
    encoder = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 128, "cls", 0).eval()
    raw_forward(encoder, tokenizer, titles[:8], bodies[:8], 8)  # warm-up, both paths
    embed_texts(encoder, tokenizer, titles[:8], bodies[:8], 288, 8)
    t0 = time.perf_counter()
    theirs = raw_forward(encoder, tokenizer, titles, bodies, args.batch_size)
    t_raw = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = embed_texts(encoder, tokenizer, titles, bodies, 288, args.batch_size)
    t_ours = time.perf_counter() - t0
    max_diff = float(np.abs(ours - theirs).max())
    assert max_diff < 1e-3, f"the two paths disagree by {max_diff}"
    n = len(titles)
    lengths = [len(x) for x in tokenizer(titles, bodies, truncation="only_second", max_length=288)["input_ids"]]
    result = {"benchmark": "embed", "peer": "raw transformers forward, batches padded to 288",
              "blocks": n, "batch_size": args.batch_size, "mean_tokens": round(float(np.mean(lengths)), 1),
              "raw": {"seconds": round(t_raw, 2), "blocks_per_s": round(n / t_raw, 1)},
              "realm": {"seconds": round(t_ours, 2), "blocks_per_s": round(n / t_ours, 1)},
              "ratio": round(t_raw / t_ours, 2), "max_abs_diff": max_diff,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    print(f"{n} blocks (mean {result['mean_tokens']} tokens), batch {args.batch_size}")
    print(f"  raw forward, pad 288  {result['raw']['blocks_per_s']:7.1f} blocks/s")
    print(f"  realm embed_texts     {result['realm']['blocks_per_s']:7.1f} blocks/s")
    print(f"  ratio realm/raw: {result['ratio']:.2f}  (max |diff| {max_diff:.2e})")
    result["parallel"] = shards_benchmark(store, sample, encoder, tokenizer, args)
    p = result["parallel"]
    print(f"parallel over {p['shards']} shards: 1 process x {p['one_process']['threads']} threads "
          f"{p['one_process']['blocks_per_s']:.1f} blocks/s, {p['workers']} processes x "
          f"{p['parallel']['threads']} threads {p['parallel']['blocks_per_s']:.1f} blocks/s "
          f"(ratio {p['ratio']:.2f})")
    write_result("embed", result)


if __name__ == "__main__":
    main()
