"""Masked-LM warm-up of the knowledge-augmented encoder on the corpus blocks, before REALM.

REALM starts its reader from BERT, whose MLM head has already learned to fill in masked
wordpieces. The bundled all-MiniLM-L6-v2 is a sentence-embedding model and ships no MLM head:
from it, salient-span pretraining alone teaches the reader next to nothing (150 demo steps left
held-out span accuracy at 1 in 128 with retrieval and without). So the reader may first
learn BERT's own objective on the blocks: 15% of the wordpieces chosen, 80% of those replaced
by [MASK], 10% by a random wordpiece, 10% kept; the head runs only at the chosen positions.

Blocks of held-out articles (the pretraining eval's) are never read here. REALM and its
null-only baseline start from the same warmed reader: one cached `reader_mlm` artifact.

Shapes: B blocks, T tokens, M masked positions, V vocabulary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import ReaderMlmConfig
from realm_core.curves import curve_markdown
from realm_core.distributed import Placement, rank_zero_artifact
from realm_core.errors import RealmError
from realm_core.pretrain.batches import BlockTexts, block_wordpieces
from realm_core.pretrain.reader_training import train_reader_steps
from realm_core.progress import NoProgress, Progress
from realm_core.retrieval.embed import pad_sequences
from realm_core.store.artifacts import ArtifactRef, ArtifactStore, StageResult
from realm_core.store.cache import CachedStage, code_version
from realm_core.training import publish_trained, step_seed

KIND = "reader_mlm"


@dataclass
class MlmBatch:
    input_ids: torch.Tensor         # (B, T) with the chosen wordpieces corrupted
    attention_mask: torch.Tensor    # (B, T)
    masked_positions: torch.Tensor  # (B, M)
    targets: torch.Tensor           # (B, M) the original wordpieces there
    target_mask: torch.Tensor       # (B, M) False on padding


def mlm_batch(pieces: list[tuple[list[int], list[int]]], tokenizer: Any, length: int, rate: float,
              generator: torch.Generator) -> MlmBatch:
    """BERT's masking of `[CLS] title [SEP] body [SEP]` (cut to `length`) for each (title, body);
    at least one wordpiece per block is chosen. [CLS] and [SEP] are never chosen."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    seqs = [[cls, *(title + [sep] + body)[:length - 2], sep] for title, body in pieces]
    ids, attention = pad_sequences(seqs, tokenizer.pad_token_id)  # (B, T)
    choosable = attention.bool() & (ids != cls) & (ids != sep)
    draw = torch.rand(ids.shape, generator=generator)
    chosen = choosable & (draw < rate)
    first = (draw.masked_fill(~choosable, 2.0)).argmin(1)  # the lowest draw: chosen if none was
    chosen[torch.arange(len(seqs)), first] = True
    m = int(chosen.sum(1).max())
    positions = torch.zeros((len(seqs), m), dtype=torch.long)
    target_mask = torch.zeros((len(seqs), m), dtype=torch.bool)
    for i, row in enumerate(chosen):
        where = row.nonzero().squeeze(1)
        positions[i, :len(where)] = where
        target_mask[i, :len(where)] = True
    targets = ids.gather(1, positions)
    corrupt = torch.rand(positions.shape, generator=generator)  # 80% [MASK], 10% random, 10% kept
    random_ids = torch.randint(len(tokenizer), positions.shape, generator=generator)
    replacement = torch.where(corrupt < 0.8, torch.full_like(targets, tokenizer.mask_token_id),
                              torch.where(corrupt < 0.9, random_ids, targets))
    inputs = ids.clone()
    rows = torch.arange(len(seqs))[:, None].expand_as(positions)
    inputs[rows[target_mask], positions[target_mask]] = replacement[target_mask]
    return MlmBatch(inputs, attention, positions, targets, target_mask)


def mlm_loss(reader: Any, batch: MlmBatch, placement: Placement) -> tuple[torch.Tensor, float]:
    """Mean negative log-likelihood of the chosen wordpieces, and the fraction predicted right."""
    dev = placement.device
    with placement.compute():
        log_probs = reader(batch.input_ids[:, None].to(dev), batch.attention_mask[:, None].to(dev),
                           batch.masked_positions.to(dev))[:, 0]  # (B, M, V)
    targets, mask = batch.targets.to(dev), batch.target_mask.to(dev)
    gold = log_probs.gather(-1, targets[..., None]).squeeze(-1)  # (B, M)
    loss = -(gold * mask).sum() / mask.sum()
    with torch.no_grad():
        accuracy = float(((log_probs.argmax(-1) == targets) & mask).sum() / mask.sum())
    return loss, accuracy


def train_reader_mlm(reader: Any, blocks: BlockTexts, block_ids: np.ndarray, tokenizer: Any,
                     config: ReaderMlmConfig, checkpoint_root: Path, progress: Progress,
                     placement: Placement) -> list[dict[str, float]]:
    """Train `reader` in place for `config.steps` steps over `block_ids`; resumes from the newest
    checkpoint. Batches and masks are functions of (seed, step)."""

    def step_loss(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        rng = np.random.default_rng(step_seed(config.seed, step))
        picks = rng.choice(block_ids, size=min(config.batch_size, len(block_ids)), replace=False)
        titles, bodies = block_wordpieces([int(z) for z in picks], blocks, tokenizer)
        generator = torch.Generator().manual_seed(step_seed(config.seed, step, stream=1))
        batch = mlm_batch(list(zip(titles, bodies, strict=True)), tokenizer, config.length,
                          config.mask_rate, generator)
        loss, accuracy = mlm_loss(reader, batch, placement)
        return loss, {"wordpiece_accuracy": accuracy}

    return train_reader_steps(reader, config, step_loss, checkpoint_root, progress, placement,
                              "reader masked-LM warm-up", "lower pretrain.reader_mlm.learning_rate")


def reader_mlm_dir(ref: ArtifactRef) -> str:
    """The warmed reader's Hugging Face directory (BertForMaskedLM + tokenizer)."""
    return str(Path(ref.path) / "reader")


def run_reader_mlm(store: ArtifactStore, blocks_ref: ArtifactRef, config: ReaderMlmConfig,
                   reader_encoder: str, is_heldout: Callable[[str], bool], heldout_rule: str,
                   placement: Placement | None = None, progress: Progress | None = None,
                   force: bool = False) -> StageResult:
    """`reader_encoder` trained on masked LM over the blocks whose article `is_heldout` rejects;
    `heldout_rule` names that rule in the cache key. Cached by blocks, encoder, config and code."""
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.retrieval.stage import encoder_hash

    place = placement or Placement.single()
    inputs = {"blocks": blocks_ref.content_hash, "reader": encoder_hash(reader_encoder),
              "heldout": heldout_rule, "precision": place.precision,
              "code": code_version((__name__,), ("torch", "transformers"))}
    cache = CachedStage(store, KIND, config, inputs, force)
    if cache.hit:
        return cache.hit
    if not place.is_main:  # under torchrun rank 0 trains; the others wait for its artifact
        return rank_zero_artifact(place, cache)
    blocks = store.open(blocks_ref, kind="blocks")
    table = blocks.read_table("blocks", ["block_id", "doc_id", "title", "text"])
    texts = BlockTexts.from_table(table)
    kept = np.asarray([z for z, doc in enumerate(texts.doc_ids) if not is_heldout(str(doc))], dtype=np.int64)
    if len(kept) < config.batch_size:
        raise RealmError(f"{blocks.path}: {len(kept)} blocks outside held-out articles; the reader "
                         f"MLM warm-up needs at least batch_size={config.batch_size}")
    tokenizer = load_tokenizer(reader_encoder)
    reader = KnowledgeAugmentedEncoder.from_pretrained(reader_encoder, dropout=0.0, seed=config.seed)
    checkpoints = cache.checkpoints
    t0 = time.perf_counter()
    curve = train_reader_mlm(reader, texts, kept, tokenizer, config, checkpoints,
                             progress or NoProgress(), place)
    tail = curve[-min(20, len(curve)):]
    stats = {"steps": config.steps, "blocks": len(kept), "heldout_blocks": len(texts) - len(kept),
             "final_loss": round(sum(r["loss"] for r in tail) / len(tail), 4),
             "final_wordpiece_accuracy": round(sum(r["wordpiece_accuracy"] for r in tail) / len(tail), 4),
             "precision": place.precision, "wall_seconds": round(time.perf_counter() - t0, 1)}
    report = "### Reader masked-LM warm-up\n\n" + curve_markdown(curve, ("step", "loss", "wordpiece_accuracy"))
    return publish_trained(cache, reader=reader, tokenizer=tokenizer, tables={"reader_mlm_metrics": curve},
                           manifest={"stats": stats, "report": report}, barrier=place.barrier)
