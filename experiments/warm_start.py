"""Warm starts compared (issue: RetroMAE vs ICT): zero-shot recall@5/20 on SQuAD-open and the DPR
NQ sample of the untrained projection, ICT, RetroMAE and RetroMAE without enhanced decoding,
each warm start trained with the same budget (steps x batch x tokens per example), all
evaluated in one run on the same blocks. With --openqa, also REALM pretraining from each warm
start followed by open-QA fine-tuning and exact match on SQuAD-open (same budgets).

Stages run through the artifact cache of the work dir, at the budgets of --config.

    .venv/bin/python experiments/warm_start.py [--preset demo] [--config F] [--root work/artifacts] [--openqa] [--steps N]

--steps N trains every warm start for N steps: a cheaper comparison at an equal, smaller budget
(the table's budget column says which was run).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from lab import config_arguments, config_from, write_result

from realm_core.config import PipelineConfig, work_dir
from realm_core.graph.resolver import Resolver
from realm_core.progress import NoProgress
from realm_core.retrieval.evaluation import run_evaluate_retrieval, standard_systems
from realm_core.retrieval.warm_start import run_warm_start_retromae
from realm_core.store.artifacts import ArtifactRef, ArtifactStore


def budget(steps: int, batch: int, tokens: int) -> dict[str, int]:
    return {"steps": steps, "batch_size": batch, "tokens_per_example": tokens,
            "tokens": steps * batch * tokens}


def openqa_em(store: ArtifactStore, cfg: PipelineConfig, blocks: ArtifactRef, spans: ArtifactRef,
              retriever: ArtifactRef) -> dict[str, Any]:
    """REALM pretraining from `retriever`, then fine-tuning and SQuAD-open exact match."""
    from realm_core.openqa.evaluation import run_evaluate_openqa
    from realm_core.openqa.finetune_stage import qa_systems, run_finetune, run_gold_reader
    from realm_core.openqa.questions_stage import run_load_questions
    from realm_core.pretrain.stage import run_pretrain

    realm = run_pretrain(store, blocks, spans, retriever, cfg.pretrain, cfg.masking,
                         cfg.embed, cfg.index, NoProgress(), chunk_encoder=cfg.chunk.encoder)
    questions = run_load_questions(store, cfg.questions)
    system = next(s for s in qa_systems(retriever, realm.ref, cfg.embed, cfg.ict.encoder)
                  if s.key == "realm")
    # the first phase of fine-tuning from REALM's reader (the stage gold_reader_realm), then REALM's own
    gold = run_gold_reader(store, questions.ref, system.reader, cfg.finetune.span_reader(), NoProgress())
    gold_ref = gold.ref if gold is not None else None
    model = run_finetune(store, blocks, questions.ref, system, gold_ref, cfg.finetune, NoProgress())
    evaluation = cfg.openqa_eval.model_copy(update={"datasets": ("squad-open",)})
    result = run_evaluate_openqa(store, blocks, questions.ref, [(system, model.ref)],
                                 cfg.finetune, evaluation, NoProgress(), gold_ref=gold_ref)
    squad = store.open(result.ref).manifest["results"]["squad-open"]
    return {"realm_model": realm.ref.path, **squad["systems"][system.name], "questions": squad["questions"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config_arguments(ap, config="experiments/configs/warm_start.yaml")  # the budgets this table was measured at
    ap.add_argument("--root", default=None, help="artifact root (default: $REALM_WORK_DIR/artifacts)")
    ap.add_argument("--openqa", action="store_true", help="also REALM-pretrain and fine-tune from each warm start")
    ap.add_argument("--steps", type=int, default=None,
                    help="train every warm start (ICT included) for this many steps instead of the preset's")
    args = ap.parse_args()
    cfg = config_from(args, *([f"{s}.steps={args.steps}" for s in ("ict", "retromae")] if args.steps else []))
    store = ArtifactStore(args.root or work_dir() / "artifacts")
    t0 = time.perf_counter()
    stages = Resolver(cfg, store)
    print(f"training ICT ({cfg.ict.steps} steps x {cfg.ict.batch_size} x "
          f"{cfg.ict.query_length}+{cfg.ict.block_length} tokens) unless cached")
    blocks, spans, ict = stages.ref("chunk"), stages.ref("spans"), stages.run("ict")
    ict_ref = stages.ref("ict")  # the same memoised artifact as `ict`, as a ref that is never None
    warm = {"RetroMAE": cfg.retromae,
            "RetroMAE, plain decoder": cfg.retromae.model_copy(update={"enhanced_decoding": False})}
    trained = {}
    for name, config in warm.items():
        print(f"training {name} ({config.steps} steps x {config.batch_size} x {config.block_length} tokens)")
        trained[name] = run_warm_start_retromae(store, blocks, config, NoProgress())
        print(f"  {trained[name].stats}")
    systems = [s for s in standard_systems(ict_ref, cfg.embed, cfg.ict.encoder, cfg.ict.projection_dim,
                                           cfg.ict.seed, {k: v.ref for k, v in trained.items()})
               if s.name != "BM25" and "reference" not in s.note]
    evaluation = run_evaluate_retrieval(store, blocks, systems, cfg.retrieval_eval, NoProgress())
    print(evaluation.report)
    manifest = store.open(evaluation.ref).manifest
    budgets = {"ICT": budget(cfg.ict.steps, cfg.ict.batch_size, cfg.ict.query_length + cfg.ict.block_length),
               **{k: budget(c.steps, c.batch_size, c.block_length) for k, c in warm.items()}}
    seconds = {"ICT": ict.stats.get("train_seconds"), **{k: v.stats["train_seconds"] for k, v in trained.items()}}
    out_json: dict[str, object] = {
        "preset": args.preset, "machine": platform.machine(), "budgets": budgets, "train_seconds": seconds,
        "results": manifest["results"], "systems": manifest["systems"],
    }
    if args.openqa:
        start = {"ICT": ict_ref, "RetroMAE": trained["RetroMAE"].ref}
        openqa: dict[str, Any] = {}
        out_json["openqa"] = openqa
        for name, retriever in start.items():
            pre = cfg.model_copy(update={"pretrain": cfg.pretrain.model_copy(
                update={"warm_start": "ict" if name == "ICT" else "retromae"})})
            openqa[name] = openqa_em(store, pre, blocks, spans, retriever)
            print(f"REALM from {name}: {openqa[name]}")
    out_json["seconds"] = round(time.perf_counter() - t0, 1)
    write_result("warm_start", out_json)


if __name__ == "__main__":
    main()
