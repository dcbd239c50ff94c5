"""How many SQuAD-open questions a span limit leaves unanswerable, per split, and (with `--eval`)
how many of those an evaluation answered: the numbers behind `finetune.max_span_length`.

A question is out of reach at limit L when its shortest answer is longer than L wordpieces
(the chunk tokenizer's, which the reader shares).

    .venv/bin/python experiments/answer_lengths.py --eval experiments/results/openqa_bm25_2ep.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

from lab import config_arguments, config_from, write_result

from realm_core.bert import load_tokenizer
from realm_core.config import work_dir
from realm_core.graph.resolver import Resolver
from realm_core.store.artifacts import ArtifactStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config_arguments(ap)
    ap.add_argument("--root", default=None, help="artifact root (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--limits", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--eval", type=Path, default=None,
                    help="a `realm evaluate --json` file: count its correct answers among the test "
                         "questions out of reach at the smallest limit")
    args = ap.parse_args()
    cfg = config_from(args)
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    questions = store.open(Resolver(cfg, store).ref("questions")).read_table("questions").to_pylist()
    tokenizer = load_tokenizer(cfg.chunk.encoder)
    shortest: dict[str, dict[str, int]] = {}
    for q in questions:
        if q["dataset"] == "squad-open":
            shortest.setdefault(q["split"], {})[q["qid"]] = min(
                len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in q["answers"])
    out: dict[str, Any] = {"splits": {}}
    for split, lengths in sorted(shortest.items()):
        out["splits"][split] = {"questions": len(lengths), **{
            f"over_{limit}": sum(n > limit for n in lengths.values()) for limit in args.limits}}
        print(split, out["splits"][split])
    if args.eval:
        limit = min(args.limits)
        out_of_reach = {qid for qid, n in shortest["test"].items() if n > limit}
        predictions = pq.read_table(Path(json.loads(args.eval.read_text())["artifact"]) / "openqa_predictions")
        correct: dict[str, int] = {}
        for r in predictions.to_pylist():
            if r["dataset"] == "squad-open" and r["qid"] in out_of_reach:
                correct[r["system"]] = correct.get(r["system"], 0) + bool(r["correct"])
        out["eval"] = {"file": str(args.eval), "limit": limit, "questions": len(out_of_reach), "correct": correct}
        print(out["eval"])
    write_result("answer_lengths", out)


if __name__ == "__main__":
    main()
