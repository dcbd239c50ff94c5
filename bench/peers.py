"""Peers shared by several benchmarks, so that each is measured the same way everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict[str, Any]) -> Path:
    """bench/results/<name>.json, the numbers README's tables are rendered from."""
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(RESULTS.parents[1])}")
    return out


def bare_reader_loss(reader: Any, reader_batch: Any) -> Any:
    """The peer's loss: mean log-probability of the gold wordpieces over all B x K reader rows,
    no retrieval scores and no marginalisation."""
    log_probs = reader(reader_batch.input_ids, reader_batch.attention_mask,
                       reader_batch.masked_positions)  # (B, K, M, V)
    k = log_probs.size(1)
    targets = reader_batch.targets
    gold = log_probs.gather(-1, targets.unsqueeze(1).expand(-1, k, -1).unsqueeze(-1))
    return -gold.mean()
