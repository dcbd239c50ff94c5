"""Peers shared by several benchmarks, so that each is measured the same way everywhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict[str, Any], folder: Path | None = None) -> Path:
    """<folder>/<name>.json (default bench/results), the numbers the pages' tables are rendered from."""
    out = (folder or RESULTS) / f"{name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return out


def fail(message: str) -> NoReturn:
    """Bad input to a benchmark or experiment (a file, a setting, an artifact that is not there
    or not the one expected): `error: <message>` on stderr and exit status 2, before any result
    is written, as every `realm` command does."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def logged(rows: list[dict[str, Any]], key: str) -> bool:
    """Whether a run logged the curve column `key` in every one of `rows`: a run from before the
    column existed has none, as a missing key (a checkpoint's or an artifact's rows) or as None
    (a results file that kept the column for every run). Every reader of an optional column asks
    this, so a run is read the same way wherever its curve is shown."""
    return bool(rows) and all(r.get(key) is not None for r in rows)


def bare_reader_loss(reader: Any, reader_batch: Any) -> Any:
    """The peer's loss: mean log-probability of the gold wordpieces over all B x K reader rows,
    no retrieval scores and no marginalisation."""
    log_probs = reader(reader_batch.input_ids, reader_batch.attention_mask,
                       reader_batch.masked_positions)  # (B, K, M, V)
    k = log_probs.size(1)
    targets = reader_batch.targets
    gold = log_probs.gather(-1, targets.unsqueeze(1).expand(-1, k, -1).unsqueeze(-1))
    return -gold.mean()


def doc_encoder_loss(doc_encoder: Any, reader_batch: Any, data: Any, doc_length: int, device: Any = "cpu") -> Any:
    """The document encoder's forward on a step's B x (k-1) retrieved blocks, summed: with its
    backward, the compute that recomputing p(z|x) with gradient (REALM §3.4) cannot skip."""
    from realm_core.pretrain.batches import doc_encoder_inputs

    retrieved = reader_batch.block_ids[:, 1:].ravel()  # (B*(K-1),)
    inputs = doc_encoder_inputs(retrieved[retrieved >= 0], data.blocks, data.tokenizer, doc_length)
    return doc_encoder(**{k: v.to(device) for k, v in inputs.items()}).sum()


def query_encoder_loss(query_encoder: Any, examples: list[Any], tokenizer: Any, device: Any = "cpu") -> Any:
    """The query encoder's forward on a step's B masked queries, summed (the retriever's other
    unavoidable compute)."""
    from realm_core.retrieval.embed import pad_sequences

    ids, mask = pad_sequences([ex.input_ids for ex in examples], tokenizer.pad_token_id)
    return query_encoder(ids.to(device), mask.to(device)).sum()
