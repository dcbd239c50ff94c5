"""Would a temperature on REALM's retrieval scores put p(z|x) on the blocks that hold the span?

REALM weighs its retrieved blocks by softmax(q.d / t) (t = 1 in the paper and here). When REALM
retrieves a span-holding block on the demo corpus, the holders get barely more of the weight than
an even split would give them (docs/experiments/realm-gain.md, "Where the retriever puts its
weight"). Two causes fit: scores too close together (a smaller t would sharpen them), or an order
within the top k that says little about which blocks hold the span (no t helps). This script
tells them apart without training anything: for each retriever, on the pretraining stage's own
held-out examples, it takes the top k-1 allowed blocks (trivial retrievals dropped, as REALM
does), scores them by exact inner product, and at each temperature reports

- the heaviest block's share of the retrieved blocks' weight (how peaked p(z|x) is);
- where a span-holding block is retrieved, the holders' share of that weight, beside the share
  an even split gives the same holders, and the difference with a 95% interval over articles.

The null block's share is left out (`pretrain.null_weight` fixes it; shares are among the
retrieved blocks). Retrievers: the warm start the run began from, and with `--checkpoint` the
encoders of a REALM run: a training checkpoint (a `step-*` folder of the pretraining stage) or
the published run (its `realm_model` artifact, after its last step); either is verified first.

    .venv/bin/python experiments/retrieval_weight.py --config experiments/configs/realm_gain.yaml \\
        [--checkpoint WORK/artifacts/checkpoints/realm_model-KEY/step-00000500 | WORK/artifacts/realm_model/KEY] \\
        [--name realm_gain_temperature]
"""

from __future__ import annotations

import argparse
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # peers.write_result: every result goes to bench/results

from peers import fail, write_result  # noqa: E402

from realm_core.artifacts import ArtifactStore
from realm_core.config import load_config, work_dir
from realm_core.errors import RealmError
from realm_core.graph import Resolver
from realm_core.pretrain.heldout import article_bootstrap

log = logging.getLogger("bench.retrieval_weight")
TEMPERATURES = (1.0, 0.5, 0.25, 0.1)


def weights(scores: np.ndarray, temperature: float) -> np.ndarray:
    """(E, K) softmax(scores / t) along each row; scores (E, K), -inf where no block was left."""
    z = scores / temperature
    z = z - z.max(axis=1, keepdims=True)
    w = np.exp(z)
    return np.asarray(w / w.sum(axis=1, keepdims=True))


def holder_weight(scores: np.ndarray, holds: np.ndarray, articles: list[str], temperature: float) -> dict[str, Any]:
    """At `temperature`: the heaviest retrieved block's mean share, and where any retrieved block
    holds the span, the holders' mean share against an even split's, paired over articles.

    scores: (E, K) retrieval scores of the retrieved blocks; holds: (E, K) bool."""
    w = weights(scores, temperature)  # (E, K)
    found = np.asarray(holds.any(axis=1), dtype=bool)  # (E,)
    real = np.isfinite(scores)  # (E, K) a retrieved block, not a gap
    share = (w * holds).sum(axis=1)[found]  # (F,)
    even = (holds.sum(axis=1) / real.sum(axis=1))[found]  # (F,)
    delta, lo, hi = article_bootstrap(share.tolist(), even.tolist(), [a for a, f in zip(articles, found.tolist(), strict=True) if f])
    return {"temperature": temperature, "max_weight": float(w.max(axis=1).mean()),
            "holder_share": float(share.mean()), "even_split_share": float(even.mean()),
            "holder_minus_even": {"delta": delta, "ci95": [lo, hi]}}


def realm_run(source: Path, store: ArtifactStore) -> tuple[int, Any]:
    """(its step, its checkpoint or None) of the REALM run to measure: `source` is a published
    `realm_model` artifact (after its last step) or a training checkpoint (`step-*`), verified
    against its recorded hashes, before any other work."""
    from realm_core.artifacts import MANIFEST
    from realm_core.errors import ArtifactError
    from realm_core.training import read_checkpoint

    if (source / MANIFEST).is_file():
        run = store.open(str(source), kind="realm_model")
        run.verify(store.verify)
        return int(run.manifest["config"]["steps"]), None
    if not source.name.startswith("step-"):
        raise ArtifactError(f"{source}: expected a realm_model artifact or a pretraining checkpoint (step-*)")
    checkpoint = read_checkpoint(source)
    for name in ("query_encoder", "doc_encoder"):
        if name not in checkpoint.state.get("modules", []):
            raise ArtifactError(f"{source / name}.safetensors: expected a pretraining checkpoint's {name} weights")
    return checkpoint.step, checkpoint


def realm_encoders(source: Path, checkpoint: Any, warm_ref: Any, reader_encoder: str) -> tuple[str, str]:
    """(query encoder dir, document encoder dir) of the run `realm_run` verified: a published
    artifact's own, or a checkpoint's weights loaded over the warm start's architecture and saved
    once under the work dir."""
    from safetensors.torch import load_file

    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir

    if checkpoint is None:
        return str(source / "query_encoder"), str(source / "doc_encoder")
    saved = work_dir() / "experiments" / "retrieval-weight" / source.parent.name / source.name
    for name, warm in (("query_encoder", query_encoder_dir(warm_ref)), ("doc_encoder", doc_encoder_dir(warm_ref))):
        if not (saved / name / "realm_retriever.json").is_file():
            model = RetrieverEncoder.from_pretrained(warm)
            model.load_state_dict(load_file(str(source / f"{name}.safetensors")), strict=True)
            model.save_pretrained(saved / name, tokenizer_source=reader_encoder)
    return str(saved / "query_encoder"), str(saved / "doc_encoder")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--config", default=None, help="the YAML file the pretraining run used")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="stage.field=value, repeatable")
    ap.add_argument("--checkpoint", default=None,
                    help="a REALM run's checkpoint folder (step-*) or its published realm_model "
                         "artifact: its encoders are measured too")
    ap.add_argument("--name", default="realm_gain_temperature", help="bench/results/<name>.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    from realm_core.pretrain.batches import retrieve_candidates
    from realm_core.pretrain.reading import allowed_holders
    from realm_core.pretrain.stage import pretrain_data
    from realm_core.progress import LogProgress
    from realm_core.retrieval.embed import embed_token_ids, load_embeddings
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.stage import run_embed_blocks
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
    from realm_core.spans.mining import open_mined

    t0 = time.perf_counter()
    cfg = load_config(args.preset, args.config, args.overrides)
    p = cfg.pretrain
    if p.warm_start == "none":
        fail("pretrain.warm_start is none: there is no starting retriever to measure")
    store = ArtifactStore(work_dir() / "artifacts")
    checkpoint_step, checkpoint = None, None
    if args.checkpoint:  # verified before the warm start and the examples are built
        try:
            checkpoint_step, checkpoint = realm_run(Path(args.checkpoint), store)
        except RealmError as e:
            fail(str(e))
    resolver = Resolver(cfg, store, progress=lambda: LogProgress(log, every=60))
    blocks_ref, spans_ref, warm_ref = resolver.ref("chunk"), resolver.ref("spans"), resolver.ref(p.warm_start)

    # the held-out examples exactly as the pretraining stage builds and splits them
    data = pretrain_data(*open_mined(store, blocks_ref, spans_ref), p, cfg.masking, cfg.chunk.encoder)
    heldout, blocks, tokenizer = data.heldout, data.blocks, data.tokenizer
    articles = [e.doc_id for e in heldout]
    holders = [set(allowed_holders(e, data.locator, blocks, p.exclusion).tolist()) for e in heldout]
    k = p.top_k - 1  # the retrieved blocks beside the null block

    warm_steps = getattr(cfg, p.warm_start).steps  # the warm start's own stage config (ict, retromae)
    retrievers: dict[str, tuple[str, str]] = {
        f"{p.warm_start.upper() if p.warm_start == 'ict' else p.warm_start} warm start, {warm_steps} steps":
            (query_encoder_dir(warm_ref), doc_encoder_dir(warm_ref))}
    if args.checkpoint:
        query_dir, doc_dir = realm_encoders(Path(args.checkpoint), checkpoint, warm_ref, p.reader_encoder)
        retrievers[f"REALM at step {checkpoint_step}"] = (query_dir, doc_dir)

    rows: dict[str, Any] = {}
    for name, (query_dir, doc_dir) in retrievers.items():
        emb = run_embed_blocks(store, blocks_ref, cfg.embed.model_copy(update={"doc_encoder": doc_dir}))
        assert emb.ref is not None
        vectors = load_embeddings(Path(emb.ref.path) / "embeddings", store.open(emb.ref).manifest["embeddings"],
                                  len(blocks))  # (N, D) the index's vectors under this retriever
        queries = embed_token_ids(RetrieverEncoder.from_pretrained(query_dir), [e.input_ids for e in heldout],
                                  tokenizer.pad_token_id, 64)  # (E, D)
        scores = queries @ vectors.T  # (E, N) exact inner products
        ranked = np.argsort(-scores, axis=1)[:, :k + 32]  # (E, k+32): room for the dropped trivial ones
        top = retrieve_candidates(ranked, heldout, blocks, k, p.exclusion)  # (E, k), -1 where none left
        picked = np.where(top >= 0, np.take_along_axis(scores, np.maximum(top, 0), axis=1), -np.inf)  # (E, k)
        holds = np.array([[int(z) in h for z in row] for row, h in zip(top, holders, strict=True)])  # (E, k)
        spread = picked.max(axis=1) - np.where(np.isfinite(picked), picked, np.inf).min(axis=1)  # (E,)
        rows[name] = {"answer_retrieved": float(holds.any(axis=1).mean()),
                      "score_spread_median": float(np.median(spread)),
                      "temperatures": [holder_weight(picked, holds, articles, t) for t in TEMPERATURES]}
        log.info("%s: span in a retrieved block for %.1f%%", name, 100 * rows[name]["answer_retrieved"])

    result = {"question": "would a temperature on REALM's retrieval scores put p(z|x) on the blocks holding the span?",
              "machine": platform.machine(), "heldout_examples": len(heldout),
              "heldout_articles": len(set(articles)), "retrieved_blocks": k, "exclusion": p.exclusion,
              "checkpoint": str(args.checkpoint) if args.checkpoint else None, "checkpoint_step": checkpoint_step,
              "retrievers": rows, "seconds": round(time.perf_counter() - t0, 1)}
    write_result(args.name, result)


if __name__ == "__main__":
    main()
