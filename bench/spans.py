"""Salient span mining benchmark and quality report.

Speed: sentences/s of the mining stage (`run_mine_spans`: NER + date regexes + merging +
wordpiece offsets + Parquet) against raw `nlp.pipe` over the same block texts, with the same
enabled pipes (only 'ner'), batch size and process count, in this one run; each measured twice,
alternating, best time kept. Cores used = CPU seconds (process and children) / wall seconds.
Quality: span precision and recall on tests/fixtures/salient_spans_gold.jsonl.

    .venv/bin/python bench/spans.py [--blocks 5000] [--n-process 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result
from span_quality import evaluate

from realm_core.config import load_config
from realm_core.graph.resolver import Resolver
from realm_core.spans.mining import load_ner, run_mine_spans, sentence_spans
from realm_core.store.artifacts import ArtifactStore

WORK = ROOT / "bench" / ".work" / "spans"


def cpu_seconds() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(fn: object) -> tuple[float, float]:
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    fn()  # type: ignore[operator]
    wall = time.perf_counter() - t0
    return wall, (cpu_seconds() - cpu0) / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=5000, help="first N blocks of the demo corpus (all: 4,137)")
    ap.add_argument("--n-process", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    cfg = load_config("demo", overrides=[f"spans.n_process={args.n_process}",
                                         f"spans.batch_size={args.batch_size}"])
    store = ArtifactStore(WORK / "artifacts")
    blocks_all = Resolver(cfg, store).ref("chunk")
    table = store.open(blocks_all).read_table("blocks").slice(0, args.blocks)
    with store.write("blocks", f"bench-first-{args.blocks}", config={}, config_hash="bench",
                     inputs={"blocks": blocks_all.content_hash}) as w:
        w.table("blocks").write(table)
        w.extra_manifest["tokenizer"] = store.open(blocks_all).manifest["tokenizer"]
    ref = store.lookup("blocks", f"bench-first-{args.blocks}").ref  # type: ignore[union-attr]
    texts = [t for t in table.column("text").to_pylist() if t and t.strip()]
    n_sentences = sum(len(sentence_spans(t)) for t in texts)

    def raw() -> None:
        nlp = load_ner(cfg.spans.spacy_model)  # the stage loads its model too
        for doc in nlp.pipe(texts, batch_size=args.batch_size, n_process=args.n_process):
            _ = [(e.start_char, e.end_char, e.label_) for e in doc.ents]

    def stage() -> None:
        run_mine_spans(store, ref, cfg.spans, force=True)

    runs: dict[str, list[tuple[float, float]]] = {"raw": [], "stage": []}
    for _ in range(2):
        runs["raw"].append(measure(raw))
        runs["stage"].append(measure(stage))
    best = {k: min(v) for k, v in runs.items()}
    raw_rate, stage_rate = n_sentences / best["raw"][0], n_sentences / best["stage"][0]
    print(f"{len(texts)} non-empty blocks, {n_sentences} sentences, n_process={args.n_process}")
    print(f"  raw nlp.pipe   {raw_rate:8.1f} sentences/s  cores used {best['raw'][1]:.2f}")
    print(f"  mining stage   {stage_rate:8.1f} sentences/s  cores used {best['stage'][1]:.2f}")
    print(f"  ratio stage/raw: {stage_rate / raw_rate:.3f}")
    mined = run_mine_spans(store, ref, cfg.spans)
    quality = evaluate(ROOT / "tests" / "fixtures" / "salient_spans_gold.jsonl",
                       cfg.spans.spacy_model, frozenset(cfg.spans.entity_labels))
    for kind, s in quality.items():
        print(f"  quality {kind:<6} P {s.precision:.3f}  R {s.recall:.3f}  "
              f"overlap-R {s.overlap_recall:.3f}  (gold {s.gold}, predicted {s.predicted})")
    result = {
        "benchmark": "spans", "peer": "raw spaCy nlp.pipe (en_core_web_sm, only 'ner')",
        "blocks": len(texts), "sentences": n_sentences, "n_process": args.n_process,
        "batch_size": args.batch_size,
        "raw": {"sentences_per_s": round(raw_rate, 1), "cores_used": round(best["raw"][1], 2),
                "seconds": [round(w, 2) for w, _ in runs["raw"]]},
        "stage": {"sentences_per_s": round(stage_rate, 1), "cores_used": round(best["stage"][1], 2),
                  "seconds": [round(w, 2) for w, _ in runs["stage"]]},
        "ratio": round(stage_rate / raw_rate, 3),
        "demo_stats": {k: v for k, v in mined.stats.items()},
        "quality": {k: {"precision": round(s.precision, 3), "recall": round(s.recall, 3),
                        "overlap_recall": round(s.overlap_recall, 3), "gold": s.gold,
                        "predicted": s.predicted, "sentences": s.sentences}
                    for k, s in quality.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    write_result("spans", result)


if __name__ == "__main__":
    main()
