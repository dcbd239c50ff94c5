"""REALM Table 2 (Guu et al. 2020, §4.4) as configs: each ablation is a list of `--set`
overrides of one pretraining run, so each is an ordinary cached stage with its own key and the
same budget as the run it is compared with. A stale index is the refresh interval times 30, as
in the paper's "30x stale MIPS" row; the paper's other rows (REALM's own, null-only as the BERT
baseline, random spans and random tokens instead of salient spans) follow it, and two rows this
project adds ask what its defaults cost: the retriever's learning rate at the reader's (1.0x
against 0.1x) and relevance read from the index's stale vectors instead of recomputed."""

from __future__ import annotations

from realm_core.config import PipelineConfig


def table2(cfg: PipelineConfig) -> dict[str, tuple[str, ...]]:
    """Row name -> overrides of `cfg`; the first row is the run every other one is set against."""
    p = cfg.pretrain
    return {
        "REALM": (),
        "null only (BERT baseline)": ("pretrain.retrieval=null_only",),
        "random spans": ("masking.strategy=random_span",),
        "random tokens": ("masking.strategy=random_token",),
        f"30x staler index (refresh every {30 * p.refresh_every})": (f"pretrain.refresh_every={30 * p.refresh_every}",),
        f"retriever lr {1.0 if p.retriever_lr_scale != 1.0 else 0.1}x": (
            f"pretrain.retriever_lr_scale={1.0 if p.retriever_lr_scale != 1.0 else 0.1}",),
        f"relevance {'index' if p.relevance == 'recompute' else 'recompute'}": (
            f"pretrain.relevance={'index' if p.relevance == 'recompute' else 'recompute'}",),
    }
