"""The REALM pretraining loop (Guu et al. 2020 §3), top to bottom like nanoGPT's train.py:

    refresh_index -> get batch -> retrieve -> forward (marginal likelihood) -> backward -> clip
    -> step -> log -> eval -> checkpoint

`train_realm` is those steps, each labelled; resuming, wrapping for data parallelism, the
micro-batched forward and backward, the curve row and the checkpoint are the helpers above it.

Gradients reach both retriever encoders through p(z|x): the index only proposes the top-k
blocks; their relevance scores are recomputed with the current query and document encoders.

Batches and dropout masks are functions of (seed, step), and a checkpoint holds the weights, the
optimizer, the curves and the index version in use, so a run killed at any moment and rerun
resumes where it was; with synchronous refresh it ends with the same parameters.

Under torchrun the loop is data parallel (`realm_core.distributed`): each rank reads its slice of
the same global batch, DistributedDataParallel averages the gradients, rank 0 refreshes the index
and checkpoints, and every rank switches to a new index version at the same step.

The step's host side (the MIPS search, then trivial-retrieval exclusion and batching), which an
accelerator waits on, is labelled `realm.search` and `realm.batching` for `torch.profiler`
(bench/gpu.py reads them); the labels cost nothing when no profiler runs.

Shapes: B batch, K blocks per example (null included), T tokens, M masked positions, D dim,
V vocabulary, U distinct blocks of a step (null included), E held-out examples, C blocks that
hold an example's span. The retriever's cold-start schedule is `realm_core.pretrain.schedule`'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from realm_core.config import PretrainConfig
from realm_core.distributed import Placement, gradient_sync, unwrap
from realm_core.pretrain.batches import (
    NULL_BLOCK,
    BlockTexts,
    ReaderBatch,
    doc_encoder_inputs,
    reader_batch,
    retrieve_candidates,
)
from realm_core.pretrain.heldout import (
    SpanLocator,
    continuation_ids,
    span_holders,
    title_body_wordpieces,
)
from realm_core.pretrain.reader import (
    KnowledgeAugmentedEncoder,
    MarginalOutput,
    marginal_likelihood,
    span_predictions,
)
from realm_core.pretrain.refresh import IndexHandle, IndexRefresher
from realm_core.pretrain.schedule import first_trained_step, retriever_learns_at
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.embed import pad_sequences
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.spans.masking import MaskedExample
from realm_core.training import (
    adamw,
    latest_checkpoint,
    learning_rate_at,
    restore_checkpoint,
    save_checkpoint,
    set_learning_rate,
    step_seed,
)


@dataclass
class RealmModels:
    """The three trained models; in a data-parallel step each that trains is wrapped by DDP."""

    reader: KnowledgeAugmentedEncoder | DistributedDataParallel         # p(y|x,z)
    query_encoder: RetrieverEncoder | DistributedDataParallel           # Embed_input
    doc_encoder: RetrieverEncoder | DistributedDataParallel             # Embed_doc

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"reader": self.reader, "query_encoder": self.query_encoder, "doc_encoder": self.doc_encoder}


@dataclass
class PretrainData:
    train: list[MaskedExample]
    heldout: list[MaskedExample]
    blocks: BlockTexts
    tokenizer: Any

    @cached_property
    def continuation(self) -> set[int]:
        """The tokenizer's word-continuing wordpieces (`##...`), for whole-word span matches."""
        return continuation_ids(self.tokenizer)

    @cached_property
    def locator(self) -> SpanLocator:
        """Which blocks hold a wordpiece sequence as whole words (every block's wordpieces in
        memory: built on first use, by the held-out rows)."""
        return SpanLocator(title_body_wordpieces(self.blocks, self.tokenizer), self.continuation)


@dataclass
class Curves:
    steps: list[dict[str, float]] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    heldout: list[dict[str, float]] = field(default_factory=list)  # per example, at the last eval
    seconds: float = 0.0  # the run's time to its latest step, over every resume (a killed part's lost steps aside)
    resumed_at: list[int] = field(default_factory=list)  # the checkpoint steps it resumed from


def batch_picks(config: PretrainConfig, step: int, n_train: int) -> np.ndarray:
    """(B,) the training examples of step `step`: a function of (seed, step) alone, so REALM and
    its null-only baseline, and a run resumed at any step, read the same batches."""
    rng = np.random.default_rng(step_seed(config.seed, step))
    return rng.choice(n_train, size=min(config.batch_size, n_train), replace=False)


def realm_forward(models: RealmModels, examples: list[MaskedExample], index: IndexHandle | None,
                  data: PretrainData, config: PretrainConfig,
                  placement: Placement | None = None,
                  train_retriever: bool = True) -> tuple[MarginalOutput, ReaderBatch, torch.Tensor]:
    """retrieve + knowledge-augmented encoder + marginal likelihood for one (micro-)batch; the
    encoders get no gradient under `pretrain.freeze_retriever` or when `train_retriever` is False.
    Returns (the marginal, the reader batch, the (B, K) relevance scores)."""
    place = placement or Placement.single()
    dev = place.device
    tok = data.tokenizer
    learning = train_retriever and not config.freeze_retriever
    retriever_grad = torch.enable_grad() if learning else torch.no_grad()
    b = len(examples)
    if config.retrieval == "null_only" or index is None:
        candidates = np.zeros((b, 0), dtype=np.int64)
        scores = torch.zeros((b, 1), device=dev)  # (B, 1): the null block alone, p(null|x) = 1
        batch = reader_batch(examples, candidates, data.blocks, tok, config.reader_length).to(dev)
    else:
        with retriever_grad, place.compute():
            ids, mask = pad_sequences([ex.input_ids for ex in examples], tok.pad_token_id)
            q = models.query_encoder(ids.to(dev), mask.to(dev)).float()  # (B, D)
        # the (stale) index proposes; REALM §3.4: trivial retrievals (the query's block) are dropped
        with record_function("realm.search"):
            _, ranked = index.index.search(q.detach().cpu().numpy(), config.top_k - 1 + config.exclusion_margin)
        with record_function("realm.batching"):
            candidates = retrieve_candidates(ranked, examples, data.blocks, config.top_k - 1,
                                             config.exclusion)  # (B, K-1)
            host_batch = reader_batch(examples, candidates, data.blocks, tok, config.reader_length)
            # the null block's score counts only where its share is not fixed (pretrain.null_weight):
            # there it is 0 and never embedded
            null = [] if config.null_weight is not None else [NULL_BLOCK]
            if config.relevance == "recompute":
                # relevance recomputed with the current document encoder, the null block first
                unique = null + sorted({int(z) for z in candidates.ravel() if z >= 0})
            else:
                unique = null  # the index's stale vectors for the retrieved blocks
            row_of = {z: i for i, z in enumerate(unique)}
            inputs = doc_encoder_inputs(np.asarray(unique), data.blocks, tok, config.doc_length) if unique else None
        batch = host_batch.to(dev)
        d = torch.zeros((0, q.size(1)), device=dev)  # (U, D)
        if inputs is not None:
            with retriever_grad, place.compute():
                d = models.doc_encoder(**{k: v.to(dev) for k, v in inputs.items()}).float()
        null_scores = q @ d[:1].T if null else torch.zeros((b, 1), device=dev)  # (B, 1)
        if config.relevance == "recompute":
            rows = torch.tensor([[row_of.get(int(z), 0) for z in row[1:]] for row in batch.block_ids],
                                device=dev, dtype=torch.long)  # (B, K-1); an empty slot (z < 0) reads row 0, masked
            retrieved = torch.einsum("bd,bkd->bk", q, d[rows]) if len(d) else torch.zeros_like(rows, dtype=q.dtype)
        else:
            stale = torch.from_numpy(index.index.reconstruct(candidates)).to(dev)  # (B, K-1, D)
            retrieved = torch.einsum("bd,bkd->bk", q, stale)
        scores = torch.cat([null_scores, retrieved], dim=1)  # (B, K)
    with place.compute():
        token_log_probs = models.reader(batch.input_ids, batch.attention_mask, batch.masked_positions)  # (B, K, M, V)
    out = marginal_likelihood(token_log_probs, batch.targets, batch.target_mask, scores, batch.block_mask,
                              config.null_weight)
    return out, batch, scores


def span_correct(out: MarginalOutput, batch: ReaderBatch) -> torch.Tensor:
    """(B,) 1.0 where the marginal prediction gets every masked wordpiece of the example right."""
    with torch.no_grad():
        predicted = span_predictions(out, batch.block_mask)  # (B, M)
        correct: torch.Tensor = ((predicted == batch.targets) | ~batch.target_mask).all(-1).float()
    return correct


def holders_in_batch(examples: list[MaskedExample], batch: ReaderBatch, data: PretrainData) -> np.ndarray:
    """(B, K) the retrieved blocks of each example that hold its masked span (`span_holders`)."""
    return span_holders(examples, batch.input_ids.cpu().numpy(), batch.block_mask.cpu().numpy(), data.continuation)


def batch_metrics(out: MarginalOutput, batch: ReaderBatch, scores: torch.Tensor,
                  holders: np.ndarray | None = None) -> dict[str, float]:
    """Span accuracy of the marginal prediction, mean p(null|x), retrieval utility (REALM §4.5:
    log p(y|x,z_best) - log p(y|x,null), z_best the highest-scoring retrieved block), and, given
    `holders` (B, K), the share of examples whose span a retrieved block holds and the mean
    p(z|x) on such blocks (0 where none is retrieved: over `answer_retrieved` it is the holders'
    share of p(z|x) where one is, which a learning retriever raises)."""
    with torch.no_grad():
        correct = span_correct(out, batch)  # (B,)
        held = torch.as_tensor(holders if holders is not None else np.zeros(batch.block_mask.shape, dtype=bool),
                               device=out.log_p_z.device)  # (B, K)
        metrics = {"span_accuracy": float(correct.mean()), "log_likelihood": float(out.log_p_y.mean()),
                   "p_null": float(out.log_p_z[:, 0].exp().mean()),
                   "answer_retrieved": float(held.any(-1).float().mean()),
                   "p_holder": float((out.log_p_z.float().exp() * held).sum(-1).mean())}
        if scores.size(1) > 1 and bool(batch.block_mask[:, 1:].any()):
            retrieved = scores[:, 1:].masked_fill(~batch.block_mask[:, 1:], float("-inf"))  # (B, K-1)
            best = retrieved.argmax(-1) + 1  # (B,)
            has = batch.block_mask[:, 1:].any(-1)
            ru = out.log_p_y_given_z.gather(1, best[:, None]).squeeze(1) - out.log_p_y_given_z[:, 0]
            metrics["retrieval_utility"] = float(ru[has].mean())
        else:
            metrics["retrieval_utility"] = 0.0
    return metrics


EVAL_METRICS = ("span_accuracy", "log_likelihood", "p_null", "retrieval_utility", "answer_retrieved", "p_holder")


def micro_batch_size(examples: int, config: PretrainConfig) -> int:
    """How many of a rank's `examples` one forward reads: the step's share of them over
    `grad_accumulation` micro-batches."""
    return max(1, math.ceil(examples / config.grad_accumulation))


def evaluate(models: RealmModels, data: PretrainData, index: IndexHandle | None,
             config: PretrainConfig, examples: int, placement: Placement | None = None,
             per_example: list[dict[str, float]] | None = None) -> dict[str, float]:
    """Held-out masked salient-span metrics, averaged over `examples` held-out examples (each
    rank scores its slice; the sums are added over ranks). `per_example`, when given, receives
    each example's row, in held-out order: whether its span was predicted, log p(y|x) and
    whether a retrieved block held the span."""
    place = placement or Placement.single()
    for m in models.modules().values():
        m.eval()
    totals = dict.fromkeys(EVAL_METRICS, 0.0)
    held = data.heldout[:examples]
    mine = place.shard(held)
    correct = np.zeros(len(held))  # (E,) this rank's examples filled in; the rest added over ranks
    log_p = np.zeros(len(held))
    found = np.zeros(len(held))
    micro = micro_batch_size(math.ceil(config.batch_size / place.world_size), config)
    with torch.no_grad():  # read as training reads, a micro-batch at a time: its memory, not more
        for start in range(0, len(mine), micro):
            chunk = mine[start:start + micro]
            out, batch, scores = realm_forward(models, chunk, index, data, config, place)
            holders = holders_in_batch(chunk, batch, data)  # (b, K)
            answer = holders.any(axis=1)  # (b,)
            for k, v in batch_metrics(out, batch, scores, holders).items():
                totals[k] += v * len(chunk)
            rows = [place.rank + (start + i) * place.world_size for i in range(len(chunk))]  # shard = held[rank::world]
            correct[rows] = span_correct(out, batch).cpu().numpy()
            log_p[rows] = out.log_p_y.float().cpu().numpy()
            found[rows] = answer
    for m in models.modules().values():
        m.train()
    summed = place.sum(list(totals.values()))
    if per_example is not None:
        n = len(held)
        every = place.sum([*correct, *log_p, *found])
        per_example[:] = [{"example": float(i), "correct": every[i], "log_p": every[n + i],
                           "answer_retrieved": every[2 * n + i]} for i in range(n)]
    return {k: v / max(len(held), 1) for k, v in zip(totals, summed, strict=True)} | {"examples": float(len(held))}


@dataclass
class _Run:
    """What a pretraining run carries from step to step besides the weights."""

    optimizer: torch.optim.Optimizer
    curves: Curves
    start: int                   # the step it starts (or resumes) at
    index: IndexHandle | None    # the index version in use
    unfrozen_at: int | None      # the step the encoders first trained at


def _resume(models: RealmModels, config: PretrainConfig, checkpoint_root: Path, base_step: int,
            index_at: Callable[[int], IndexHandle] | None, place: Placement) -> _Run:
    """The optimizer over what trains (the encoders at `retriever_lr_scale`), restored with the
    weights, curves and index version from the newest checkpoint when there is one."""
    for m in models.modules().values():
        m.to(place.device)
    trainable = [models.reader] + ([] if config.freeze_retriever else [models.query_encoder, models.doc_encoder])
    scales = [1.0] + [config.retriever_lr_scale] * (len(trainable) - 1)
    optimizer = adamw(trainable, config.learning_rate, config.weight_decay, scales)
    curves, start, index_step = Curves(), 0, base_step
    if (ckpt := latest_checkpoint(checkpoint_root)) is not None:
        restore_checkpoint(ckpt, models.modules(), optimizer)
        start, index_step = ckpt.step, int(ckpt.state["index_step"])
        saved = ckpt.state["curves"]
        # a checkpoint written before runs kept their time: the sum of its steps' own times
        seconds = saved.get("seconds", sum(1.0 / r["steps_per_s"] for r in saved["steps"] if r.get("steps_per_s")))
        curves = Curves(saved["steps"], saved["evals"], saved.get("heldout", []), float(seconds),
                        [*saved.get("resumed_at", []), start])
    index = index_at(index_step) if index_at is not None else None
    return _Run(optimizer, curves, start, index, first_trained_step(curves.steps, config.retriever_frozen_steps))


def _for_ranks(models: RealmModels, config: PretrainConfig, retrieving: bool,
               place: Placement) -> tuple[RealmModels, list[torch.nn.Module]]:
    """The models as a step runs them (DDP wraps what trains and runs forward; the null-only
    baseline never calls the encoders), and those whose gradients ranks average."""
    encoders = retrieving and not config.freeze_retriever
    shared = RealmModels(place.data_parallel(models.reader),
                         *(place.data_parallel(m) if encoders else m for m in (models.query_encoder, models.doc_encoder)))
    return shared, [m for m in shared.modules().values() if m is not unwrap(m)]


def refresh_index(refresher: IndexRefresher | None, run: _Run, models: RealmModels, config: PretrainConfig,
                  step: int, base_step: int, index_at: Callable[[int], IndexHandle] | None,
                  place: Placement) -> None:
    """REALM §3.4's asynchronous refresh: swap in a finished refresh, start the next on schedule
    (none while the encoders are frozen: they are what the index was built with); every rank
    switches to the version rank 0 announces, at the same step."""
    index = run.index
    wanted = index.step if index is not None else base_step
    if refresher is not None:
        if (fresh := refresher.poll()) is not None:
            index, wanted = fresh, fresh.step
        if run.unfrozen_at is not None and step > run.unfrozen_at and step % config.refresh_every == 0:
            refresher.submit(models.query_encoder, models.doc_encoder, base_step + step)
            if refresher.sync and (fresh := refresher.poll()) is not None:
                index, wanted = fresh, fresh.step
    if index_at is not None and (wanted := place.broadcast_int(wanted)) != (index.step if index else None):
        index = index_at(wanted)
    run.index = index


def _forward_backward(shared: RealmModels, syncing: list[torch.nn.Module], examples: list[MaskedExample],
                      global_batch: int, run: _Run, data: PretrainData, config: PretrainConfig,
                      retriever_learns: bool, place: Placement) -> tuple[float, dict[str, float]]:
    """Retrieve, read, marginalise and backpropagate over micro-batches; the gradient is that of
    the global batch mean (DDP averages over ranks, hence the world-size factor). Returns this
    rank's loss and metric sums."""
    totals = dict.fromkeys(EVAL_METRICS, 0.0)
    loss_sum = 0.0
    micro = micro_batch_size(len(examples), config)
    starts = range(0, len(examples), micro)
    for start in starts:
        chunk = examples[start:start + micro]
        with gradient_sync(syncing, sync=start == starts[-1]):
            out, batch, scores = realm_forward(shared, chunk, run.index, data, config, place,
                                               train_retriever=retriever_learns)
            (out.loss * (len(chunk) * place.world_size / global_batch)).backward()  # type: ignore[no-untyped-call]
        loss_sum += out.loss.item() * len(chunk)
        for k, v in batch_metrics(out, batch, scores, holders_in_batch(chunk, batch, data)).items():
            totals[k] += v * len(chunk)
    return loss_sum, totals


def _step_row(done: int, lr: float, loss_sum: float, totals: dict[str, float], global_batch: int, run: _Run,
              base_step: int, retriever_learns: bool, seconds: float, refresher: IndexRefresher | None,
              place: Placement) -> dict[str, float]:
    """A step's curve row, its sums added over ranks (the global batch's means)."""
    loss, *summed = place.sum([loss_sum, *totals.values()])
    index_step = run.index.step if run.index is not None else base_step
    row = {"step": float(done), "loss": loss / global_batch, "learning_rate": lr,
           **{k: v / global_batch for k, v in zip(totals, summed, strict=True)},
           "index_step": float(index_step), "staleness": float(base_step + done - index_step),
           "retriever_trained": float(retriever_learns), "steps_per_s": 1.0 / max(seconds, 1e-9),
           "blocked_s": refresher.blocked_seconds if refresher else 0.0}
    if not math.isfinite(row["loss"]):
        raise FloatingPointError(f"step {done}: loss is {row['loss']}; lower pretrain.learning_rate")
    return row


def _checkpoint(checkpoint_root: Path, done: int, models: RealmModels, run: _Run, base_step: int,
                place: Placement) -> None:
    """Rank 0 writes weights, optimizer, curves and the index version; every rank resumes from
    the shared root."""
    if place.is_main:
        c = run.curves
        save_checkpoint(checkpoint_root, done, models.modules(), run.optimizer,
                        {"curves": {"steps": c.steps, "evals": c.evals, "heldout": c.heldout, "seconds": c.seconds,
                                    "resumed_at": c.resumed_at},
                         "index_step": run.index.step if run.index is not None else base_step,
                         "base_step": base_step})
    place.barrier()


def train_realm(models: RealmModels, data: PretrainData, config: PretrainConfig,
                index_at: Callable[[int], IndexHandle] | None, refresher: IndexRefresher | None,
                base_step: int, checkpoint_root: Path, progress: Progress | None = None,
                on_log: Callable[[dict[str, float]], None] | None = None,
                placement: Placement | None = None) -> Curves:
    """Train in place for `config.steps` steps; resumes from the newest checkpoint.

    `index_at(step)` opens index version v<step>; `base_step` is the retriever's step before
    pretraining (the warm start's), whose index the run starts with, so versions keep rising.
    Without `index_at` (the null-only baseline) nothing is retrieved. Under torchrun only rank 0
    is given a `refresher`; the others follow the index version it broadcasts."""
    place = placement or Placement.single()
    progress = progress or NoProgress()
    run = _resume(models, config, checkpoint_root, base_step, index_at, place)
    curves = run.curves
    retrieving = index_at is not None and config.retrieval == "realm"
    shared, syncing = _for_ranks(models, config, retrieving, place)
    for m in models.modules().values():
        m.train()
    progress.start("REALM pretraining", config.steps, "steps")
    progress.advance(run.start)
    t_last = time.perf_counter()
    began = t_last - curves.seconds
    for step in range(run.start, config.steps):
        # the cold start (Atlas: --freeze_retriever_steps): the reader learns to read retrieved
        # blocks before the retriever's gradient, p(z|x)'s share of log p(y|x), carries signal
        retriever_learns = retrieving and retriever_learns_at(step, config)
        if retriever_learns and run.unfrozen_at is None:
            run.unfrozen_at = step
        refresh_index(refresher, run, models, config, step, base_step, index_at, place)
        # get batch: a function of (seed, step) only; each rank reads its slice
        picks = batch_picks(config, step, len(data.train))  # (B,)
        examples = place.shard([data.train[i] for i in picks])
        lr = learning_rate_at(step, config.learning_rate, config.warmup_steps, config.steps)
        set_learning_rate(run.optimizer, lr)
        torch.manual_seed(step_seed(config.seed, step, stream=1 + place.rank))  # dropout masks
        run.optimizer.zero_grad(set_to_none=True)
        # forward (retrieve, read, marginal likelihood) and backward
        loss_sum, totals = _forward_backward(shared, syncing, examples, len(picks), run, data, config,
                                             retriever_learns, place)
        # clip, step
        torch.nn.utils.clip_grad_norm_([p for g in run.optimizer.param_groups for p in g["params"]],
                                       config.max_grad_norm)
        run.optimizer.step()
        done = step + 1
        # log
        now = time.perf_counter()
        row = _step_row(done, lr, loss_sum, totals, len(picks), run, base_step, retriever_learns, now - t_last,
                        refresher, place)
        t_last = now
        curves.steps.append(row)
        progress.advance(1)
        if on_log is not None and (done % config.log_every == 0 or done == config.steps):
            on_log(row)
        # evaluate on held-out masked spans
        if done % config.eval_every == 0 or done == config.steps:
            progress.pause(f"held-out evaluation at step {done} "
                           f"({min(config.eval_examples, len(data.heldout)):,} masked spans)")
            t_eval = time.perf_counter()
            curves.evals.append({"step": float(done), **evaluate(
                shared, data, run.index, config, config.eval_examples, place,
                curves.heldout if done == config.steps else None)})
            t_last += time.perf_counter() - t_eval  # the next step's steps_per_s is its own
            progress.resume()
        curves.seconds = time.perf_counter() - began
        # checkpoint
        if done % config.checkpoint_every == 0 or done == config.steps:
            _checkpoint(checkpoint_root, done, models, run, base_step, place)
    progress.finish()
    if refresher is not None:
        refresher.wait()
    return curves
