"""Where retrieval costs the reader: of the SQuAD-open questions the gold-paragraph reader answers
and a retrieving system misses, how many had no answer in the retrieved blocks, and of the rest,
whether the wrong answer was read from a block that holds a gold answer (DPR's has_answer) (a distractor inside
the right block) or appears only in blocks that hold none (the reader chose the wrong block).

The block an answer was read from is found by its text: a prediction whose string occurs in a
retrieved block holding an answer counts as read there; one that occurs only in blocks without
an answer counts as the wrong block.

    .venv/bin/python experiments/reader_errors.py bench/.work/dev_base.json --root work/exp
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

from lab import config_arguments, config_from, write_result

from realm_core.answers import has_answer, token_string
from realm_core.config import work_dir
from realm_core.graph.resolver import Resolver
from realm_core.openqa.finetune_stage import GOLD_SYSTEM
from realm_core.store.artifacts import ArtifactStore
from realm_core.store.cache import existing_artifacts_only


def classify(gold: dict[str, dict[str, Any]], system: dict[str, dict[str, Any]], texts: list[str]) -> Counter[str]:
    """Counts over the questions `gold` answers and `system` misses (rows keyed by qid)."""
    out: Counter[str] = Counter()
    for qid, row in system.items():
        if not gold[qid]["correct"] or row["correct"]:
            continue
        out["lost"] += 1
        if row["answer_rank"] is None:
            out["no answer retrieved"] += 1
            continue
        out[f"answer retrieved, first at rank {row['answer_rank']}"] += 1
        holding = [z for z in row["block_ids"] if has_answer(row["answers"], token_string(texts[z]))]
        predicted = row["predicted"]
        if predicted and any(predicted in texts[z] for z in holding):
            out["read from the block that holds the answer"] += 1
        elif predicted and any(predicted in texts[z] for z in row["block_ids"]):
            out["read from a block without the answer"] += 1
        else:
            out["not found in any retrieved block"] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval", type=Path, help="a `realm evaluate --json` file with the gold paragraph reader")
    config_arguments(ap)
    ap.add_argument("--root", default=None, help="artifact root (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--name", default="reader_errors", help="experiments/results/<name>.json")
    args = ap.parse_args()
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    with existing_artifacts_only():
        blocks = store.open(Resolver(config_from(args), store).ref("chunk"), kind="blocks")
    texts = blocks.read_table("blocks", ["text"]).column("text").to_pylist()
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for r in pq.read_table(Path(json.loads(args.eval.read_text())["artifact"]) / "openqa_predictions").to_pylist():
        if r["dataset"] == "squad-open":
            rows.setdefault(r["system"], {})[r["qid"]] = r
    if GOLD_SYSTEM not in rows:
        raise SystemExit(f"{args.eval}: no {GOLD_SYSTEM!r} rows to compare with")
    summary: dict[str, dict[str, int]] = {}
    out = {"eval": str(args.eval), "questions": len(rows[GOLD_SYSTEM]), "systems": summary}
    for system, by_qid in rows.items():
        if system == GOLD_SYSTEM or not any(r["block_ids"] for r in by_qid.values()):
            continue
        counts = classify(rows[GOLD_SYSTEM], by_qid, texts)
        summary[system] = dict(sorted(counts.items()))
        print(system, json.dumps(summary[system], indent=2))
    write_result(args.name, out)


if __name__ == "__main__":
    main()
