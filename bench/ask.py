"""`realm ask --questions` throughput: the query side's reading as it ships, against the reading it
replaced, in the same run, on the demo system (after `make demo`), its store only read.

Both answer the SQuAD-open test questions (articles 35-39) with BM25 + the demo's fine-tuned
reader through `realm ask`'s engine (`Answerer.ask`), the models loaded first by one question:

- peer, the reading before it was reworked: fp32, 8 questions a batch, each batch's 8 x k rows
  in one forward padded to the batch's longest row (`openqa_eval.batch_size=8`,
  `openqa_eval.reader_tokens` large enough for one chunk, `query.precision=fp32`);
- shipped: the config's defaults (32 questions a batch, their rows read longest first in chunks
  of `openqa_eval.reader_tokens` padded wordpieces, `query.precision` from the preset: bf16
  autocast where the CPU computes it natively).

Questions per second, the ratio, EM of each with the paired difference (95% bootstrap interval)
and McNemar's p, and how many answers changed: the rework is meant to be faster, not different.

    .venv/bin/python bench/ask.py        # writes bench/results/ask.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from peers import fail, write_result

from realm_core.config import PipelineConfig, load_config, resolve_data_path, work_dir
from realm_core.errors import MissingArtifactError, RealmError
from realm_core.graph.resolver import Resolver
from realm_core.openqa.significance import mcnemar_p, paired_bootstrap
from realm_core.store.artifacts import ArtifactStore

SYSTEM = "bm25"
TEST_ARTICLES = (35, 39)
PEER: dict[str, dict[str, Any]] = {"query": {"precision": "fp32"}, "openqa_eval": {"batch_size": 8, "reader_tokens": 10**9}}


def configured(cfg: PipelineConfig, changes: dict[str, dict[str, Any]]) -> PipelineConfig:
    return cfg.model_copy(update={section: getattr(cfg, section).model_copy(update=fields)
                                  for section, fields in changes.items()})


def answer(cfg: PipelineConfig, root: str, questions: list[Any]) -> tuple[float, list[Any]]:
    from realm_core.query import QueryEngine

    engine = QueryEngine(Resolver(cfg, ArtifactStore(root)))
    engine.ask([questions[0].question], SYSTEM)  # the reader, BM25 and the blocks loaded
    t0 = time.perf_counter()
    answers = engine.ask([q.question for q in questions], SYSTEM)
    return time.perf_counter() - t0, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=None, help="the demo's artifact store (default $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--questions", type=int, default=None, help="only the first N test questions (default all)")
    args = ap.parse_args()
    import torch

    from flows.demo import cpu_description
    from realm_core.distributed import Placement
    from realm_core.openqa.predict import answer_correct
    from realm_core.openqa.reading import QAQuestion
    from realm_core.query import QueryEngine
    from realm_core.questions import squad_questions

    cfg = load_config("demo")
    root = str(args.root or work_dir() / "artifacts")
    try:
        QueryEngine(Resolver(cfg, ArtifactStore(root))).stages.run(f"finetune_{SYSTEM}")
    except (MissingArtifactError, RealmError) as e:
        fail(f"{root}: the demo's BM25 + reader is not there; run `make demo` first ({e})")
    questions = [QAQuestion(x.qid, x.question, x.answers) for x in
                 squad_questions(resolve_data_path(cfg.retrieval_eval.squad_path), TEST_ARTICLES).questions]
    questions = questions[:args.questions]
    began = time.perf_counter()
    result: dict[str, Any] = {"cpu": cpu_description(("avx512_bf16", "amx_bf16")), "threads": torch.get_num_threads(),
                              "torch": torch.__version__, "system": SYSTEM, "questions": len(questions),
                              "top_k": cfg.finetune.top_k, "runs": {}}
    correct: dict[str, list[bool]] = {}
    texts: dict[str, list[str]] = {}
    for name, run_cfg in (("today", configured(cfg, PEER)), ("shipped", cfg)):
        seconds, answers = answer(run_cfg, root, questions)
        correct[name] = [answer_correct(a.answer, q) for a, q in zip(answers, questions, strict=True)]
        texts[name] = [a.answer for a in answers]
        result["runs"][name] = {
            "precision": run_cfg.query.precision, "resolved_precision": Placement(torch.device("cpu"), run_cfg.query.precision).precision,
            "batch_size": run_cfg.openqa_eval.batch_size,
            "reader_tokens": run_cfg.openqa_eval.reader_tokens, "seconds": round(seconds, 1),
            "questions_per_s": round(len(questions) / seconds, 2), "EM": float(np.mean(correct[name]))}
        print(f"{name}: {len(questions) / seconds:.2f} questions/s, EM {result['runs'][name]['EM']:.3f}", flush=True)
    today, shipped = result["runs"]["today"], result["runs"]["shipped"]
    result["speedup"] = round(shipped["questions_per_s"] / today["questions_per_s"], 2)
    delta, lo, hi = paired_bootstrap(correct["shipped"], correct["today"])
    result["paired"] = {"EM": {"delta": delta, "ci95": [lo, hi], "mcnemar_p": mcnemar_p(correct["shipped"],
                                                                                     correct["today"]),
                               "within_noise": lo <= 0.0 <= hi}}
    result["answers_changed"] = int(sum(a != b for a, b in zip(texts["today"], texts["shipped"], strict=True)))
    result["wall_seconds"] = round(time.perf_counter() - began, 1)
    print(f"shipped / today: {result['speedup']}x questions/s; EM {delta:+.3f} [{lo:+.3f}, {hi:+.3f}]; "
          f"{result['answers_changed']} of {len(questions)} answers changed")
    write_result("ask", result)
    print(json.dumps({k: v for k, v in result.items() if k != "cpu"}, indent=2))


if __name__ == "__main__":
    main()
