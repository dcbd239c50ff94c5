"""What a finished pretraining run reports: its stats (the manifest's `stats`, read by the gain
tables and the demo's summary), its held-out rows (one per masked span, for paired
comparisons between runs) and its markdown report."""

from __future__ import annotations

from typing import Any

from realm_core.config import MaskingConfig, PretrainConfig
from realm_core.curves import curve_markdown
from realm_core.distributed import Placement
from realm_core.pretrain.heldout import recoverable
from realm_core.pretrain.loop import Curves, PretrainData
from realm_core.pretrain.refresh import IndexRefresher
from realm_core.pretrain.schedule import first_trained_step, retriever_trained, utility_below_zero

STEP_COLUMNS = ("step", "loss", "span_accuracy", "p_null", "retrieval_utility", "answer_retrieved", "p_holder",
                "staleness", "retriever_trained")
EVAL_COLUMNS = ("step", "span_accuracy", "log_likelihood", "p_null", "retrieval_utility", "answer_retrieved",
                "p_holder")


def heldout_rows(curves: Curves, data: PretrainData, config: PretrainConfig) -> list[dict[str, Any]]:
    """Each held-out masked span at the last evaluation: predicted or not, log p(y|x), whether its
    span occurs outside its own block (recoverable) and whether a retrieved block held it."""
    locator = data.locator
    return [{"example": i, "doc_id": e.doc_id, "block_id": e.block_id, "correct": r["correct"] > 0.5,
             "log_p": r["log_p"], "recoverable": recoverable(e, locator, data.blocks, config.exclusion),
             "answer_retrieved": r["answer_retrieved"] > 0.5}
            for i, (e, r) in enumerate(zip(data.heldout, curves.heldout, strict=True))]


def collapse_window(config: PretrainConfig) -> int:
    """Steps averaged when watching retrieval utility for a collapse onto the null block."""
    return max(10, min(100, config.steps // 10))


def pretrain_stats(curves: Curves, data: PretrainData, rows: list[dict[str, Any]], config: PretrainConfig,
                   masking: MaskingConfig, refresher: IndexRefresher | None, wall: float, placement: Placement,
                   reader_start: dict[str, Any] | None) -> dict[str, Any]:
    """The run's stats. `wall` is this process's training time, which the refresher's blocked
    time is a share of; the collapse watch starts once the encoders train (a frozen first phase
    cannot collapse: its reader is still learning)."""
    retrieving = config.retrieval == "realm"
    final = curves.evals[-1]
    recoverable_correct = [bool(r["correct"]) for r in rows if r["recoverable"]]
    tail = curves.steps[-min(20, len(curves.steps)):]
    trained = [r for r in curves.steps if retriever_trained(r, config.retriever_frozen_steps)]
    collapse = utility_below_zero(trained, collapse_window(config)) if retrieving else None
    unfrozen = first_trained_step(curves.steps, config.retriever_frozen_steps) if retrieving else None
    return {
        "steps": config.steps, "retrieval": config.retrieval, "masking": masking.strategy,
        "train_examples": len(data.train), "heldout_examples": len(data.heldout),
        "heldout_articles": len({e.doc_id for e in data.heldout}), "recoverable_examples": len(recoverable_correct),
        "heldout_span_accuracy": round(final["span_accuracy"], 4),
        "recoverable_span_accuracy": round(sum(recoverable_correct) / len(recoverable_correct), 4)
        if recoverable_correct else None,
        "heldout_retrieval_utility": round(final["retrieval_utility"], 4),
        "heldout_p_null": round(final["p_null"], 4),
        "heldout_answer_retrieved": round(final["answer_retrieved"], 4),
        "heldout_p_holder": round(final["p_holder"], 4),
        "final_loss": round(sum(r["loss"] for r in tail) / len(tail), 4),
        "utility_below_zero_steps": list(collapse) if collapse else None,
        # the first step (1-based) whose update reached the encoders; None: they never trained
        "retriever_trained_from_step": unfrozen + 1 if unfrozen is not None else None,
        # the whole run's training time, resumes included; the steps a resume repeated are not in it
        "wall_seconds": round(curves.seconds, 1),
        "resumed_at_steps": curves.resumed_at,
        "blocked_on_index_fraction": round((refresher.blocked_seconds if refresher else 0.0) / wall, 4),
        "refreshes_skipped": refresher.skipped if refresher else 0,
        "world_size": placement.world_size, "device": str(placement.device), "precision": placement.precision,
        "reader_mlm": reader_start,
    }


def pretrain_report(curves: Curves, stats: dict[str, Any], config: PretrainConfig, reader_report: str) -> str:
    """The stage report: the reader warm-up's, a collapse warning where retrieval utility stayed
    below zero, the training curve and the held-out evaluations."""
    collapse = stats["utility_below_zero_steps"]
    warning = (f"**Retrieval utility stayed below 0 from step {collapse[0]} to {collapse[1]}** (mean of "
               f"every {collapse_window(config)} steps): the retrieved blocks made the masked spans less likely "
               "than the null block, the sign of a retriever collapsing onto it.\n\n" if collapse else "")
    return (reader_report + warning + "### REALM pretraining: training curve\n\n"
            + curve_markdown(curves.steps, STEP_COLUMNS) + "\n\n### held-out masked salient spans\n\n"
            + curve_markdown(curves.evals, EVAL_COLUMNS))
