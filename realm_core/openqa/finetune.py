"""Open-QA reader training (REALM §3.3-§3.4; ORQA), top to bottom like the
pretraining loop:

    get batch (the next questions of this epoch) -> retrieve top-k -> retrieval logits
    -> span reader -> marginal likelihood over blocks and matching spans -> backward -> step
    -> every eval_every steps: dev exact match, keep the best weights, stop when it stalls

It runs in two phases with the same loop. First the reader alone reads each training question's
gold passage (the `gold` retriever: DPR trains its reader on gold passages too), which is
cheap and retriever-independent; then each system fine-tunes its reader and query encoder on
its own top-k blocks. The document encoder and the index stay frozen: a dense retriever's
logits are the current query embedding against the blocks' stored embeddings.

Shapes: B questions, K blocks, T tokens, L max span length, S = T * L spans of a block.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realm_core.config import ReaderBudget, SpanReaderConfig
from realm_core.distributed import Placement
from realm_core.openqa.predict import QAModels, answer_correct, predict, retrieval_log_p
from realm_core.openqa.reading import (
    BlockStore,
    QAQuestion,
    answer_ids,
    gold_row_lengths,
    gold_tensor,
    reader_rows,
)
from realm_core.openqa.span_reader import span_marginal_likelihood
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.retrievers import Proposal, Retriever
from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
    step_seed,
)

BEST_DIR = "best"


@dataclass
class FinetuneCurves:
    steps: list[dict[str, float]] = field(default_factory=list)
    best_dev_em: float | None = None
    best_step: int = 0
    stopped_early: bool = False


def epoch_batch(n: int, batch_size: int, seed: int, step: int, lengths: Sequence[int] | None = None) -> list[int]:
    """Question indices of `step`: the questions in a seeded order, epoch after epoch, each
    question once per epoch (a function of seed and step, so a resumed run draws the same).
    With `lengths` (each question's reader-row length) the epoch's batches are grouped by length
    (`length_grouped_epoch`); an epoch is then ceil(n / batch_size) batches."""
    if lengths is not None:
        epoch, index = divmod(step, math.ceil(n / batch_size))
        return length_grouped_epoch(lengths, batch_size, seed, epoch)[index]
    out: list[int] = []
    position = step * batch_size
    while len(out) < min(batch_size, n):
        epoch, offset = divmod(position, n)
        order = np.random.default_rng(step_seed(seed, epoch, stream=7)).permutation(n)
        take = min(batch_size - len(out), n - offset)
        out += order[offset:offset + take].tolist()
        position += take
    return out


def length_grouped_epoch(lengths: Sequence[int], batch_size: int, seed: int, epoch: int,
                         pool: int = 50) -> list[list[int]]:
    """One epoch's batches of similar length: the questions in the seeded order `epoch_batch`
    uses, cut into pools of `pool` batches, each pool sorted by length and cut into batches, the
    batches then in a seeded order (so long and short batches alternate through the epoch)."""
    rng = np.random.default_rng(step_seed(seed, epoch, stream=7))
    order = rng.permutation(len(lengths))
    size = np.asarray(lengths)
    batches: list[list[int]] = []
    for s in range(0, len(order), pool * batch_size):
        chunk = order[s:s + pool * batch_size]
        chunk = chunk[np.argsort(size[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size].tolist() for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _save_best(root: Path, models: QAModels, step: int, dev_em: float) -> None:
    from safetensors.torch import save_model

    best = root / BEST_DIR
    tmp = root / f".{BEST_DIR}-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for name, module in models.modules().items():
        save_model(module, str(tmp / f"{name}.safetensors"))
    (tmp / "best.json").write_text(json.dumps({"step": step, "dev_em": dev_em}))
    if best.exists():
        import shutil

        shutil.rmtree(best)
    tmp.rename(best)


def _load_best(root: Path, models: QAModels) -> None:
    from safetensors.torch import load_model

    for name, module in models.modules().items():
        load_model(module, str(root / BEST_DIR / f"{name}.safetensors"))


def train_reader(models: QAModels, retriever: Retriever, questions: list[QAQuestion], blocks: BlockStore,
                 tokenizer: Any, config: SpanReaderConfig, budget: ReaderBudget, checkpoint_root: Path,
                 dev: list[QAQuestion] | None = None, progress: Progress | None = None,
                 placement: Placement | None = None, query_learning_rate: float | None = None) -> FinetuneCurves:
    """Train in place for `budget.steps` steps (resuming from the newest checkpoint); with `dev`
    questions, evaluate dev exact match every `budget.eval_every` steps, keep the best weights,
    stop after `budget.patience` evaluations without a gain, and end on the best weights. The
    query encoder trains, at `query_learning_rate`, only where one is given (the open phase of
    a retriever that trains); otherwise the retriever stays as it is.

    A step reads the next `batch_size` questions of the epoch; those whose retrieved blocks hold
    no answer as whole wordpieces give no gradient (REALM and ORQA train only on the others).
    Under torchrun every rank reads its slice of the same batch; gradients are summed over
    ranks, each rank's loss already divided by the batch's global count."""
    place = placement or Placement.single()
    progress = progress or NoProgress()
    for m in models.modules().values():
        m.to(place.device)
    train_retriever = retriever.trainable and models.query_encoder is not None and query_learning_rate is not None
    trainable = [models.reader] + ([models.query_encoder] if train_retriever else [])
    scales = [1.0] + ([query_learning_rate / budget.learning_rate]
                      if train_retriever and query_learning_rate is not None else [])
    optimizer = adamw(trainable, budget.learning_rate, config.weight_decay, scales)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    curves, start, wall = FinetuneCurves(), 0, 0.0
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, models.modules(), optimizer)
        start, curves = ckpt.step, FinetuneCurves(ckpt.state["curves"], ckpt.state.get("best_dev_em"),
                                                  ckpt.state.get("best_step", 0))
        wall = float(ckpt.state.get("wall_seconds", 0.0))
    for m in models.modules().values():
        m.train()
    progress.start(f"train reader ({retriever.name})", budget.steps, "steps")
    progress.advance(start)
    stale = sum(1 for r in curves.steps if r.get("dev_em") is not None and r["step"] > curves.best_step)
    began = time.monotonic() - wall
    lengths = (gold_row_lengths(questions, blocks, tokenizer, config.question_length, config.reader_length)
               if budget.group_by_length else None)
    for step in range(start, budget.steps):
        if budget.patience and stale >= budget.patience:
            curves.stopped_early = True
            break
        # get batch: the next questions of the epoch; those with a gold span retrieved
        batch_q = [questions[i] for i in epoch_batch(len(questions), budget.batch_size, budget.seed, step, lengths)]
        proposal = retriever.propose(batch_q)  # (B, K)
        usable = [i for i, row in enumerate(proposal.ids) if any(blocks.holds_answer(batch_q[i], int(z)) for z in row)]
        lr = learning_rate_at(step, budget.learning_rate, budget.warmup_steps, budget.steps)
        set_learning_rate(optimizer, lr)
        torch.manual_seed(step_seed(budget.seed, step, stream=1 + place.rank))  # dropout masks
        optimizer.zero_grad(set_to_none=True)
        row: dict[str, Any] = {"step": float(step + 1), "learning_rate": lr, "loss": float("nan"),
                               "with_gold": len(usable) / max(len(batch_q), 1), "questions": float(len(usable)),
                               "dev_em": None, "row_tokens": 0}
        mine = place.shard(usable)  # this rank's slice of the batch
        log_p_y = torch.zeros(0)
        if mine:
            batch = [batch_q[i] for i in mine]
            sub = Proposal(proposal.ids[mine], proposal.scores[mine])
            q_ids = [tokenizer(q.question, truncation=True, max_length=config.question_length)["input_ids"]
                     for q in batch]
            rows = reader_rows(q_ids, sub.ids, blocks, config.reader_length, tokenizer.sep_token_id,
                               tokenizer.pad_token_id)
            gold = gold_tensor(rows, [answer_ids(q, tokenizer) for q in batch], config.max_span_length)
            row["row_tokens"] = int(rows.input_ids.numel())
            with torch.set_grad_enabled(train_retriever), place.compute():
                log_p_z = retrieval_log_p(retriever, batch, sub, config.train_temperature(retriever.name))  # (B, K)
            with place.compute():
                span_scores = models.reader(rows.input_ids.to(place.device), rows.attention_mask.to(place.device),
                                            rows.body_mask.to(place.device),
                                            rows.token_type_ids.to(place.device))  # (B, K, T, L)
            log_p_y = span_marginal_likelihood(span_scores.float(), gold.to(place.device),
                                               log_p_z.float().to(place.device), config.form)  # (B,)
        finite = torch.isfinite(log_p_y)  # an answer in the text but not as whole wordpieces
        local_sum = -log_p_y[finite].sum() if bool(finite.any()) else None
        n_finite, loss_sum = place.sum([float(finite.sum()), float(local_sum.detach()) if local_sum is not None else 0.0])
        row["no_gold_span"] = len(usable) - int(n_finite)  # e.g. every answer longer than max_span_length
        if n_finite > 0:  # every rank agrees: the same step is taken everywhere
            if local_sum is not None:
                (local_sum / n_finite).backward()  # type: ignore[no-untyped-call]
            place.sum_gradients(params)
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            row["loss"] = loss_sum / n_finite
            if not math.isfinite(row["loss"]):
                raise FloatingPointError(f"step {step + 1}: loss is {row['loss']}; lower the learning rate")
        progress.advance(1)
        done = step + 1
        # eval: dev exact match, the best weights kept
        if dev and budget.eval_every and (done % budget.eval_every == 0 or done == budget.steps):
            progress.pause(f"dev exact match at step {done} ({len(dev):,} questions)")
            em = dev_exact_match(models, retriever, dev, blocks, tokenizer, config, place)
            progress.resume()
            row["dev_em"] = em
            for m in models.modules().values():
                m.train()
            if curves.best_dev_em is None or em > curves.best_dev_em:
                curves.best_dev_em, curves.best_step, stale = em, done, 0
                if place.is_main:
                    _save_best(checkpoint_root, models, done, em)
            else:
                stale += 1
        row["wall_seconds"] = time.monotonic() - began
        curves.steps.append(row)
        if done % config.checkpoint_every == 0 or done == budget.steps or (budget.patience and stale >= budget.patience):
            if place.is_main:
                save_checkpoint(checkpoint_root, done, models.modules(), optimizer,
                                {"curves": curves.steps, "best_dev_em": curves.best_dev_em,
                                 "best_step": curves.best_step, "wall_seconds": row["wall_seconds"]})
            place.barrier()
    progress.finish()
    if curves.best_dev_em is not None and (checkpoint_root / BEST_DIR).is_dir():
        _load_best(checkpoint_root, models)
    for m in models.modules().values():
        m.eval()
    return curves


def dev_exact_match(models: QAModels, retriever: Retriever, dev: list[QAQuestion], blocks: BlockStore,
                    tokenizer: Any, config: SpanReaderConfig, placement: Placement | None = None) -> float:
    temperature = config.train_temperature(retriever.name)
    preds = predict(models, retriever, dev, blocks, tokenizer, config, batch_size=16,
                    temperatures=(temperature,), placement=placement)[temperature]
    return float(np.mean([answer_correct(p.answer, q) for p, q in zip(preds, dev, strict=True)]))

