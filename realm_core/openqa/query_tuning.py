"""ORQA's early update (Lee et al. 2019, §5) as a phase of its own: the query encoder alone,
trained so that blocks holding an answer rank first in the frozen index, before any reader
reads a retrieved block.

    get batch (the next questions of the epoch) -> the top-c blocks under the current query
    encoder -> which of them hold an answer (DPR's has_answer) -> loss
    -log sum over those of softmax(q . d_z over the c) -> backward -> step
    -> every eval_every steps: dev recall@k, the best weights kept

The document encoder and the block embeddings stay frozen, as in fine-tuning (REALM §3.4), so a
step costs one query-encoder forward and backward on the batch's questions: an epoch of SQuAD-open
train takes minutes on 2 cores, where the open phase (the reader on every retrieved block) takes
hours. Questions with no answer-holding block among the c give no gradient and are counted.

Shapes: B questions, C candidates, D embedding dim.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realm_core.config import QueryBudget
from realm_core.openqa.finetune import epoch_batch
from realm_core.openqa.reading import BlockStore, QAQuestion
from realm_core.openqa.retrievers import Dense
from realm_core.progress import NoProgress, Progress
from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
    step_seed,
)

BEST_FILE = "best-query-encoder.safetensors"


@dataclass
class QueryCurves:
    steps: list[dict[str, Any]] = field(default_factory=list)
    dev_recall_before: float | None = None
    best_dev_recall: float | None = None
    best_step: int = 0
    stopped_early: bool = False

    def stats(self, n_questions: int, budget: QueryBudget) -> dict[str, Any]:
        seen = int(sum(r["questions"] for r in self.steps))
        return {"steps_run": len(self.steps), "examples_seen": seen, "epochs": round(seen / max(n_questions, 1), 3),
                "no_positive": int(sum(r["no_positive"] for r in self.steps)), "candidates": budget.candidates,
                "wall_seconds": round(self.steps[-1]["wall_seconds"], 1) if self.steps else 0.0,
                "dev_recall_before": self.dev_recall_before, "best_dev_recall": self.best_dev_recall,
                "best_step": self.best_step, "stopped_early": self.stopped_early}


def early_update_loss(q: torch.Tensor, candidates: torch.Tensor, holds: torch.Tensor) -> torch.Tensor:
    """(B,) -log sum over the answer-holding candidates of softmax(q . d) over all candidates.

    q: (B, D) query embeddings; candidates: (B, C, D) block embeddings; holds: (B, C) bool.
    A row with no answer-holding candidate gives +inf (the caller leaves it out)."""
    log_p = torch.log_softmax(torch.einsum("bd,bcd->bc", q, candidates), dim=-1)  # (B, C)
    return -torch.logsumexp(log_p.masked_fill(~holds, float("-inf")), dim=-1)


def answer_ranks(retriever: Dense, questions: list[QAQuestion], blocks: BlockStore, depth: int,
                 batch_size: int = 64) -> list[int | None]:
    """Per question, the rank of the first answer-holding block in the retriever's top `depth`
    (None: none there)."""
    top_k, retriever.top_k = retriever.top_k, depth
    out: list[int | None] = []
    try:
        for s in range(0, len(questions), batch_size):
            batch = questions[s:s + batch_size]
            for q, row in zip(batch, retriever.propose(batch).ids, strict=True):
                holds = [blocks.holds_answer(q, int(z)) for z in row]
                out.append(holds.index(True) + 1 if any(holds) else None)
    finally:
        retriever.top_k = top_k
    return out


def dev_recall(retriever: Dense, dev: list[QAQuestion], blocks: BlockStore) -> float:
    """The share of `dev` with an answer-holding block in the retriever's top_k."""
    ranks = answer_ranks(retriever, dev, blocks, retriever.top_k)
    return sum(r is not None for r in ranks) / max(len(dev), 1)


def _save_best(encoder: Any, root: Path) -> None:
    from safetensors.torch import save_model

    root.mkdir(parents=True, exist_ok=True)
    save_model(encoder, str(root / f".{BEST_FILE}"))
    (root / f".{BEST_FILE}").replace(root / BEST_FILE)


def train_query_encoder(retriever: Dense, questions: list[QAQuestion], blocks: BlockStore, budget: QueryBudget,
                        weight_decay: float, max_grad_norm: float, checkpoint_root: Path,
                        dev: list[QAQuestion] | None = None, progress: Progress | None = None,
                        checkpoint_every: int = 100) -> QueryCurves:
    """Train `retriever.query_encoder` in place for `budget.steps` steps (resuming from the newest
    checkpoint under `checkpoint_root`); with `dev`, measure recall@top_k before and every
    `budget.eval_every` steps, keep the best weights (the starting ones among them), stop after
    `budget.patience` evaluations without a gain, and end on the best weights."""
    from safetensors.torch import load_model

    progress = progress or NoProgress()
    encoder = retriever.query_encoder
    optimizer = adamw([encoder], budget.learning_rate, weight_decay)
    curves, start, wall = QueryCurves(), 0, 0.0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, {"query_encoder": encoder}, optimizer)
        start, wall = ckpt.step, float(ckpt.state["wall_seconds"])
        curves = QueryCurves(ckpt.state["curves"], ckpt.state["dev_recall_before"], ckpt.state["best_dev_recall"],
                             ckpt.state["best_step"])
    elif dev and budget.eval_every:  # the starting weights are a candidate too (step 0)
        encoder.eval()
        curves.dev_recall_before = curves.best_dev_recall = dev_recall(retriever, dev, blocks)
        _save_best(encoder, checkpoint_root)
    stale = sum(1 for r in curves.steps if r.get("dev_recall") is not None and r["step"] > curves.best_step)
    c = min(budget.candidates, len(retriever.vectors))
    progress.start("train query encoder (early update)", budget.steps, "steps")
    progress.advance(start)
    began = time.monotonic() - wall
    for step in range(start, budget.steps):
        if budget.patience and stale >= budget.patience:
            curves.stopped_early = True
            break
        encoder.train()
        # get batch; its top-c blocks under the current query encoder and which hold an answer
        batch = [questions[i] for i in epoch_batch(len(questions), budget.batch_size, budget.seed, step)]
        torch.manual_seed(step_seed(budget.seed, step, stream=1))  # dropout masks
        q = retriever.embed(batch)  # (B, D), with gradient
        _, ids = retriever.index.search(q.detach().cpu().numpy(), c)  # (B, C)
        ids = np.asarray(ids, dtype=np.int64)
        holds = torch.tensor([[blocks.holds_answer(x, int(z)) for z in row] for x, row in zip(batch, ids, strict=True)],
                             dtype=torch.bool)  # (B, C)
        usable = holds.any(dim=-1)
        lr = learning_rate_at(step, budget.learning_rate, budget.warmup_steps, budget.steps)
        set_learning_rate(optimizer, lr)
        optimizer.zero_grad(set_to_none=True)
        row: dict[str, Any] = {"step": step + 1, "learning_rate": lr, "loss": float("nan"),
                               "questions": int(usable.sum()), "no_positive": int((~usable).sum()), "dev_recall": None}
        if bool(usable.any()):
            candidates = retriever.vectors[torch.from_numpy(ids)].to(q.device)  # (B, C, D)
            loss = early_update_loss(q, candidates, holds.to(q.device))[usable.to(q.device)].mean()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), max_grad_norm)
            optimizer.step()
            row["loss"] = float(loss.detach())
        progress.advance(1)
        done = step + 1
        # eval: dev recall, the best weights kept
        if dev and budget.eval_every and (done % budget.eval_every == 0 or done == budget.steps):
            encoder.eval()
            row["dev_recall"] = recall = dev_recall(retriever, dev, blocks)
            if curves.best_dev_recall is None or recall > curves.best_dev_recall:
                curves.best_dev_recall, curves.best_step, stale = recall, done, 0
                _save_best(encoder, checkpoint_root)
            else:
                stale += 1
        row["wall_seconds"] = time.monotonic() - began
        curves.steps.append(row)
        if done % checkpoint_every == 0 or done == budget.steps or (budget.patience and stale >= budget.patience):
            save_checkpoint(checkpoint_root, done, {"query_encoder": encoder}, optimizer,
                            {"curves": curves.steps, "dev_recall_before": curves.dev_recall_before,
                             "best_dev_recall": curves.best_dev_recall, "best_step": curves.best_step,
                             "wall_seconds": row["wall_seconds"]})
    progress.finish()
    if curves.best_dev_recall is not None and (checkpoint_root / BEST_FILE).is_file():
        load_model(encoder, str(checkpoint_root / BEST_FILE))
    encoder.eval()
    return curves
