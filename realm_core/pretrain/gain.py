"""REALM's gain over its null-only baseline (REALM Table 2's BERT row), measured by the pipeline.

The two pretraining runs differ only in retrieval: the same starting reader, masked examples,
batches (functions of seed and step) and held-out spans. This stage compares them:

- `heldout_test`: held-out masked-span accuracy, REALM minus null-only on all spans and on the
  recoverable ones (a non-trivial block holds the span), with 95% intervals from resampling
  articles, and split by whether a block REALM retrieved held the span.
- `holder_retrieval`: where retrieval now puts the span-holding block: per recoverable held-out
  example the rank of the best allowed holder under REALM's encoders against the warm start's,
  within the top k and the top 100, paired.
- `zero_shot`: SQuAD-open dev recall@5/@20 of the warm start before and REALM's encoders after.

Shapes: E examples, N blocks, D embedding dim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from realm_core.config import PipelineConfig
from realm_core.pretrain.heldout import article_bootstrap
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version

KIND = "realm_gain"


def _paired(a: Any, b: Any, articles: list[str], resamples: int) -> dict[str, Any]:
    delta, lo, hi = article_bootstrap(np.asarray(a, float).tolist(), np.asarray(b, float).tolist(), articles,
                                      resamples)
    return {"delta": delta, "ci95": [lo, hi]}


def heldout_test(realm: list[dict[str, Any]], null: list[dict[str, Any]], resamples: int = 10_000) -> dict[str, Any]:
    """Both runs' `pretrain_heldout` rows, scored on the same held-out examples: accuracy on all
    and on the recoverable ones, REALM minus null-only with 95% intervals over articles, and the
    same split by whether REALM's retrieved blocks held the span (there copying could help;
    elsewhere only what the reader knows)."""
    if [(r["doc_id"], r["block_id"]) for r in realm] != [(r["doc_id"], r["block_id"]) for r in null]:
        raise ValueError("the two runs were scored on different held-out examples")
    if not realm:
        raise ValueError("no held-out examples")
    articles = [r["doc_id"] for r in realm]
    keep = [i for i, r in enumerate(realm) if r["recoverable"]]

    def accuracy(rows: list[dict[str, Any]], idx: list[int] | None = None) -> float | None:
        picked = [rows[i] for i in idx] if idx is not None else rows
        return sum(r["correct"] for r in picked) / len(picked) if picked else None

    def diff(idx: list[int]) -> dict[str, Any]:
        return _paired([realm[i]["correct"] for i in idx], [null[i]["correct"] for i in idx],
                       [articles[i] for i in idx], resamples)

    every = diff(list(range(len(realm))))
    gain: dict[str, Any] = {"accuracy_delta": every["delta"], "accuracy_ci95": every["ci95"],
                            "recoverable_delta": None, "recoverable_ci95": None}
    if keep:
        rec = diff(keep)
        gain.update({"recoverable_delta": rec["delta"], "recoverable_ci95": rec["ci95"]})
    by_retrieval = {}
    for name, wanted in (("answer_retrieved", True), ("answer_not_retrieved", False)):
        idx = [i for i, r in enumerate(realm) if bool(r.get("answer_retrieved")) == wanted]
        by_retrieval[name] = {"examples": len(idx), "REALM": accuracy(realm, idx), "null only": accuracy(null, idx),
                              **(diff(idx) if idx else {"delta": None, "ci95": None})}
    return {"examples": len(realm), "articles": len(set(articles)), "recoverable": len(keep),
            "systems": {n: {"accuracy": accuracy(rs), "recoverable_accuracy": accuracy(rs, keep),
                            "log_p": sum(r["log_p"] for r in rs) / len(rs)}
                        for n, rs in (("REALM", realm), ("null only", null))},
            "gain": gain, "by_retrieval": by_retrieval}


def holder_retrieval(start_rank: np.ndarray, end_rank: np.ndarray, articles: list[str], top: int,
                     resamples: int = 10_000) -> dict[str, Any]:
    """The best allowed span-holding block's rank (1-based; (E,) each) under the warm start
    (`start_rank`) and under REALM's encoders (`end_rank`) on the same recoverable examples:
    how often it is within the top `top` and the top 100, end minus start paired over articles."""
    out: dict[str, Any] = {"examples": len(articles),
                           "median_rank": {"start": float(np.median(start_rank)), "end": float(np.median(end_rank))},
                           "rank_rose": float(np.mean(end_rank < start_rank)),
                           "rank_fell": float(np.mean(end_rank > start_rank))}
    for k in (top, 100):
        out[f"within_top_{k}"] = {"start": float(np.mean(start_rank <= k)), "end": float(np.mean(end_rank <= k)),
                                  "end_minus_start": _paired(end_rank <= k, start_rank <= k, articles, resamples)}
    return out


def _holder_ranks(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef, warm: ArtifactRef,
                  realm: ArtifactRef, cfg: PipelineConfig, heldout_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank of each recoverable held-out example's best holder under the warm start and REALM."""
    from realm_core.distributed import Placement
    from realm_core.pretrain.reader_copy import query_vectors, warm_start_vectors
    from realm_core.pretrain.reading import oracle_blocks
    from realm_core.pretrain.stage import pretrain_data
    from realm_core.retrieval.encoders import RetrieverEncoder
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir
    from realm_core.spans.mining import open_mined

    p = cfg.pretrain
    placement = Placement.from_env(p.device, p.precision)
    data = pretrain_data(*open_mined(store, blocks_ref, spans_ref), p, cfg.masking, cfg.chunk.encoder)
    if [(e.doc_id, e.block_id) for e in data.heldout] != [(r["doc_id"], r["block_id"]) for r in heldout_rows]:
        raise ValueError(f"{realm.path}: scored other held-out examples than the ones rebuilt here")
    recoverable = [e for e, r in zip(data.heldout, heldout_rows, strict=True) if r["recoverable"]]
    ranks = {}
    for name, q_dir, d_dir in (("start", query_encoder_dir(warm), doc_encoder_dir(warm)),
                               ("end", str(Path(realm.path) / "query_encoder"), str(Path(realm.path) / "doc_encoder"))):
        vectors = warm_start_vectors(store, blocks_ref, d_dir, cfg.embed, len(data.blocks))  # (N, D)
        encoder = RetrieverEncoder.from_pretrained(q_dir).to(placement.device)
        q = query_vectors(encoder, recoverable, data.tokenizer.pad_token_id, placement.precision)  # (E, D)
        ranks[name] = oracle_blocks(recoverable, q, vectors, data.locator, data.blocks, p.exclusion).rank
    found = (ranks["start"] > 0) & (ranks["end"] > 0)
    articles = [e.doc_id for e, f in zip(recoverable, found, strict=True) if f]
    return holder_retrieval(ranks["start"][found], ranks["end"][found], articles, p.top_k - 1, cfg.gain.resamples)


def zero_shot(store: ArtifactStore, blocks_ref: ArtifactRef, warm: ArtifactRef, realm: ArtifactRef,
              cfg: PipelineConfig) -> dict[str, Any] | None:
    """SQuAD-open dev recall@5/@20 (every block a candidate, DPR's has_answer rule) of the warm
    start before and of REALM's encoders after pretraining, each system's blocks embedded by its
    own document encoder; after minus before paired on the same questions. None where the
    questions name no SQuAD-open dev split."""
    from realm_core.retrieval.evaluation import RetrieverSystem, run_evaluate_retrieval
    from realm_core.retrieval.warm_start import doc_encoder_dir, query_encoder_dir

    dev = next((s for s in cfg.questions.sources if s.dataset == "squad-open" and s.split == "dev"), None)
    if dev is None:
        return None
    systems = [RetrieverSystem(name, "dense", query_encoder_dir(ref),
                               cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(ref)}))
               for name, ref in (("before", warm), ("after", realm))]
    ecfg = cfg.retrieval_eval.model_copy(update={"squad_path": dev.path, "squad_articles": dev.articles,
                                                 "dpr_path": None, "ks": (5, 20)})
    result = run_evaluate_retrieval(store, blocks_ref, systems, ecfg)
    assert result.ref is not None
    art = store.open(result.ref)
    rows = art.read_table("retrieval_results").to_pylist()
    hits = {name: [r["first_hit"] for r in rows if r["system"] == name] for name in ("before", "after")}
    if [r["qid"] for r in rows if r["system"] == "before"] != [r["qid"] for r in rows if r["system"] == "after"]:
        raise ValueError("zero-shot: the two systems were scored on different questions")
    recall = art.manifest["results"]["squad-open"]["systems"]
    out: dict[str, Any] = {"questions": len(hits["before"]),
                           "articles": list(dev.articles) if dev.articles is not None else None}
    for name in hits:
        out[name] = {f"R@{k}": recall[name][f"R@{k}"] for k in (5, 20)}
    questions = [r["qid"] for r in rows if r["system"] == "after"]  # each question its own cluster
    for k in (5, 20):
        out[f"R@{k} after - before"] = _paired([0 < x <= k for x in hits["after"]], [0 < x <= k for x in hits["before"]],
                                               questions, cfg.gain.resamples)
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _interval(d: dict[str, Any]) -> str:
    if d.get("delta") is None:
        return "-"
    lo, hi = d["ci95"]
    return f"{100 * d['delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def gain_report(result: dict[str, Any]) -> str:
    """The stage's markdown: the held-out pair, the split by retrieval, holder retrieval, zero-shot."""
    h = result["heldout"]
    g = h["gain"]
    lines = ["### REALM against null-only pretraining",
             "",
             f"Both runs scored on the same {h['examples']:,} held-out masked spans ({h['articles']} articles never "
             f"trained on; {h['recoverable']:,} recoverable: a block that is no trivial retrieval holds the span). "
             "Intervals: 95%, articles resampled.",
             "",
             "| system | held-out span accuracy (%) | recoverable (%) | mean log p |",
             "|---|---|---|---|"]
    for name, s in h["systems"].items():
        lines.append(f"| {name} | {_pct(s['accuracy'])} | {_pct(s['recoverable_accuracy'])} | {s['log_p']:.3f} |")
    lines += ["", f"REALM - null-only: all spans {_interval({'delta': g['accuracy_delta'], 'ci95': g['accuracy_ci95']})} "
              f"points; recoverable {_interval({'delta': g['recoverable_delta'], 'ci95': g['recoverable_ci95']})}.",
              "", "| where | examples | REALM (%) | null only (%) | REALM - null (points) |", "|---|---|---|---|---|"]
    for name, part in h["by_retrieval"].items():
        where = "a retrieved block held the span" if name == "answer_retrieved" else "no retrieved block held it"
        lines.append(f"| {where} | {part['examples']:,} | {_pct(part['REALM'])} | {_pct(part['null only'])} | "
                     f"{_interval(part)} |")
    if (r := result.get("holder_retrieval")) is not None:
        top = next(int(k.rsplit("_", 1)[1]) for k in r if k.startswith("within_top_") and k != "within_top_100")
        lines += ["", "### Where retrieval puts the span-holding block", "",
                  f"On {r['examples']:,} recoverable held-out spans, the best allowed holder's rank under the warm "
                  f"start's encoders and under REALM's (median {r['median_rank']['start']:.0f} -> "
                  f"{r['median_rank']['end']:.0f}; it rose for {_pct(r['rank_rose'])}%, fell for "
                  f"{_pct(r['rank_fell'])}%).", "",
                  "| within | warm start (%) | REALM (%) | REALM - warm start (points) |", "|---|---|---|---|"]
        for k in (top, 100):
            w = r[f"within_top_{k}"]
            lines.append(f"| top {k} | {_pct(w['start'])} | {_pct(w['end'])} | {_interval(w['end_minus_start'])} |")
    if (z := result.get("zero_shot")) is not None:
        lines += ["", "### Zero-shot SQuAD-open dev recall", "",
                  f"{z['questions']:,} dev questions, every block a candidate.", "",
                  "| | before (warm start) | after (REALM) | after - before (points) |", "|---|---|---|---|"]
        for k in (5, 20):
            lines.append(f"| R@{k} | {_pct(z['before'][f'R@{k}'])} | {_pct(z['after'][f'R@{k}'])} | "
                         f"{_interval(z[f'R@{k} after - before'])} |")
    return "\n".join(lines)


def run_realm_gain(store: ArtifactStore, blocks_ref: ArtifactRef, spans_ref: ArtifactRef, warm: ArtifactRef,
                   realm: ArtifactRef, null: ArtifactRef, cfg: PipelineConfig, force: bool = False) -> StageResult:
    """Compare the REALM run `realm` with the null-only run `null` (both `realm_model`
    artifacts of the same examples); cached by both runs and the warm start."""
    inputs = {"blocks": blocks_ref.content_hash, "spans": spans_ref.content_hash, "warm_start": warm.content_hash,
              "realm": realm.content_hash, "null": null.content_hash, "embed": cfg.embed.config_hash(),
              "retrieval_eval": cfg.retrieval_eval.config_hash(), "questions": cfg.questions.config_hash(),
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, KIND, cfg.gain, inputs, force)
    if cache.hit:
        return cache.hit
    realm_art, null_art = store.open(realm, kind="realm_model"), store.open(null, kind="realm_model")
    realm_rows = realm_art.read_table("pretrain_heldout").to_pylist()
    null_rows = null_art.read_table("pretrain_heldout").to_pylist()
    result: dict[str, Any] = {"heldout": heldout_test(realm_rows, null_rows, cfg.gain.resamples),
                              "steps": realm_art.manifest["stats"]["steps"],
                              "wall_seconds": {"REALM": realm_art.manifest["stats"]["wall_seconds"],
                                               "null only": null_art.manifest["stats"]["wall_seconds"]}}
    if realm_art.manifest["stats"].get("retriever_trained_from_step") is not None:
        result["holder_retrieval"] = _holder_ranks(store, blocks_ref, spans_ref, warm, realm, cfg, realm_rows)
        if cfg.gain.zero_shot:
            result["zero_shot"] = zero_shot(store, blocks_ref, warm, realm, cfg)
    with cache.write() as out:
        out.extra_manifest.update({"stats": result, "report": gain_report(result)})
    return cache.result()
