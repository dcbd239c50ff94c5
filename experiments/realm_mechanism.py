"""REALM's mechanism on a corpus where the answer is known (experiments/mechanism.py):
does the gradient of log p(y|x) teach the retriever to find the block that holds a masked fact,
and does the reader learn to copy from it?

The synthetic corpus is written as JSONL and goes through the project's own stages (ingest,
chunk, salient spans, the index and the pretraining stage, all cached in the work dir's store).
Five rows, scored on the same held-out examples (entities never trained on, their blocks in
the index):

- `REALM`: the pretraining stage as configured (experiments/configs/realm_mechanism.yaml);
- `null only`: the same run reading the null block alone (a masked LM, the prior's ceiling);
- `frozen retriever`: REALM with no gradient into either encoder (the retriever as it starts);
- `oracle block`: REALM's trained reader given each example's gold block as its one block;
- `REALM reader, null block`: the same trained reader given the null block alone (retrieval
  taken away: at the prior unless held-out facts leaked into training).

Recall@1 of the gold block on the held-out queries is measured with the retriever as it starts
and as it ends (exact inner product over every block, trivial retrievals dropped); the peer of
every figure is measured in the same run.

    .venv/bin/python experiments/realm_mechanism.py [--entities 2000] [--distractors 400] [--set s.f=v] [--name realm_mechanism]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from lab import write_result

from flows.settings import PARAMETER_DOCS
from realm_core.config import PipelineConfig, load_config, work_dir
from realm_core.graph.resolver import Resolver
from realm_core.progress import LogProgress
from realm_core.store.artifacts import ArtifactStore

log = logging.getLogger("bench.realm_mechanism")
CONFIG = ROOT / "experiments" / "configs" / "realm_mechanism.yaml"
SYSTEMS = {"REALM": (), "null only": ("pretrain.retrieval=null_only",),
           "frozen retriever": ("pretrain.freeze_retriever=true",)}


def mechanism_config(corpus_path: Path, overrides: list[str], config: Path = CONFIG) -> PipelineConfig:
    source = json.dumps([{"kind": "jsonl", "name": "synthetic", "path": str(corpus_path)}])
    return load_config("demo", config, [f"ingest.sources={source}", *overrides])


def copy_trained_reader(cfg: PipelineConfig, store: ArtifactStore, corpus: Any, steps: int, root: Path,
                        progress: Any) -> str:
    """A reader that already copies: the masked-LM warm-up's reader trained `steps` steps of
    `pretrain.batch_size` to predict each training fact reading its gold block alone
    (`train_copy_reader`). Saved under `root` by what it depends on; returns its directory."""
    from mechanism import fact_examples, gold_blocks

    from realm_core.distributed import Placement
    from realm_core.pretrain.reader_mlm import reader_mlm_dir
    from realm_core.pretrain.reading import CopyTraining, copy_trained
    from realm_core.pretrain.stage import run_warm_reader

    p = cfg.pretrain
    blocks, tokenizer, train, _ = mechanism_examples(cfg, store)
    place = Placement.from_env(p.device, p.precision)
    warm = run_warm_reader(store, Resolver(cfg, store).ref("chunk"), p, place, progress())
    start = reader_mlm_dir(warm.ref) if warm is not None else p.reader_encoder
    facts = [e for e, f in zip(train, fact_examples(train, corpus, tokenizer), strict=True) if f]
    training = CopyTraining(steps=steps, batch_size=p.batch_size, learning_rate=p.learning_rate,
                            reader_length=p.reader_length, warmup_steps=p.warmup_steps, seed=p.seed)
    saved, _ = copy_trained(start, facts, gold_blocks(facts, blocks, corpus.partner()), blocks, tokenizer,
                            training, root / "copy-readers", [start], place, progress(), dropout=p.dropout)
    return saved


def mechanism_examples(cfg: PipelineConfig, store: ArtifactStore) -> tuple[Any, Any, list[Any], list[Any]]:
    """(blocks, tokenizer, train, held-out): the examples exactly as the pretraining stage builds
    and splits them, from the cached chunk and span artifacts."""
    from realm_core.pretrain.stage import pretrain_data
    from realm_core.spans.mining import open_mined

    resolver = Resolver(cfg, store)
    data = pretrain_data(*open_mined(store, resolver.ref("chunk"), resolver.ref("spans")), cfg.pretrain, cfg.masking,
                         cfg.chunk.encoder)
    return data.blocks, data.tokenizer, data.train, data.heldout


def run_mechanism(entities: int, distractors: int, seed: int, overrides: list[str], root: Path,
                  progress: Any = None, systems: tuple[str, ...] = tuple(SYSTEMS),
                  copy_steps: int = 0) -> dict[str, Any]:
    """Write the corpus, run the pretraining systems (`systems`, REALM first; all three by
    default) through the stage cache, then measure the oracle reader, the REALM reader without
    retrieval and the gold block's recall@1 before and after. With `copy_steps`, every system
    starts from a reader copy-trained that many steps on the gold blocks (`copy_trained_reader`)
    instead of the masked-LM warm-up's. Returns the results dict."""
    if not systems or systems[0] != "REALM" or set(systems) - set(SYSTEMS):
        raise SystemExit(f"systems {systems}: expected REALM first, then any of {list(SYSTEMS)[1:]}")
    import torch
    from mechanism import (
        embed_blocks,
        fact_examples,
        gold_block_accuracy,
        gold_block_recall,
        gold_blocks,
        make_corpus,
        prior_accuracy,
    )

    from realm_core.distributed import Placement
    from realm_core.pretrain.reader import KnowledgeAugmentedEncoder
    from realm_core.pretrain.stage import fresh_encoders
    from realm_core.retrieval.encoders import RetrieverEncoder

    t0 = time.perf_counter()
    probe = mechanism_config(root / "corpus.jsonl", overrides)
    corpus = make_corpus(entities, distractors, seed, probe.pretrain.heldout_every)
    digest = hashlib.sha256(json.dumps(corpus.documents).encode()).hexdigest()[:12]
    path = corpus.write_jsonl(root / "corpora" / f"synthetic-{digest}.jsonl")
    store = ArtifactStore(root / "artifacts")
    make_progress = progress or (lambda: LogProgress(log, every=60))
    copy_reader = None
    if copy_steps > 0:
        copy_reader = copy_trained_reader(mechanism_config(path, overrides), store, corpus, copy_steps, root,
                                          make_progress)
        # the reader starts copying; the retriever from the same BERT as without the copy phase
        overrides = [*overrides, "pretrain.reader_mlm.steps=0", f"pretrain.reader_encoder={copy_reader}",
                     f"pretrain.fresh_encoder={probe.pretrain.fresh_encoder or probe.pretrain.reader_encoder}"]
    runs: dict[str, dict[str, Any]] = {}
    for name in systems:
        extra = SYSTEMS[name]
        cfg = mechanism_config(path, [*overrides, *extra])
        log.info("%s: %s", name, " ".join(extra) or "(the config)")
        result = Resolver(cfg, store, progress=make_progress).run("pretrain")
        assert result.ref is not None
        art = store.open(result.ref)
        runs[name] = {"cfg": cfg, "ref": result.ref, "stats": result.stats,
                      "heldout_rows": art.read_table("pretrain_heldout").to_pylist(),
                      "evals": art.read_table("pretrain_eval").to_pylist(),
                      "steps": art.read_table("pretrain_metrics").to_pylist()}

    # the examples exactly as the stage built and split them (checked against its held-out rows)
    cfg = runs["REALM"]["cfg"]
    blocks, tokenizer, train, heldout = mechanism_examples(cfg, store)
    for name, run in runs.items():
        if [(r["doc_id"], r["block_id"]) for r in run["heldout_rows"]] != [(e.doc_id, e.block_id) for e in heldout]:
            raise SystemExit(f"{name}: the stage scored other held-out examples than the ones rebuilt here")
    heldout_docs = {f"{corpus.source}:{d}" for e in corpus.entities if e.heldout for d in e.doc_ids}
    leaked = [e for e in train if e.doc_id in heldout_docs]
    if leaked or not heldout:
        raise SystemExit(f"held-out entities are not held out: {len(leaked)} training examples from them")
    # scored: the held-out examples that mask a fact (a few mask a name spaCy took for a place)
    facts = fact_examples(heldout, corpus, tokenizer)
    scored = [e for e, f in zip(heldout, facts, strict=True) if f]
    gold = gold_blocks(scored, blocks, corpus.partner())

    # the measurements run on the device the runs trained on (a GPU where there is one)
    device = Placement.from_env(cfg.pretrain.device, cfg.pretrain.precision).device

    def recall(ref: Any | None) -> float:
        if ref is None:  # the retriever pretraining starts from, as the stage builds it
            q, d = fresh_encoders(cfg.pretrain, dropout=False)
        else:
            q = RetrieverEncoder.from_pretrained(str(Path(ref.path) / "query_encoder"))
            d = RetrieverEncoder.from_pretrained(str(Path(ref.path) / "doc_encoder"))
        q, d = q.to(device), d.to(device)
        vectors = embed_blocks(d, blocks, tokenizer, cfg.pretrain.doc_length)
        return gold_block_recall(q, vectors, scored, gold, blocks, tokenizer.pad_token_id,
                                 cfg.pretrain.exclusion)

    torch.manual_seed(0)
    start = recall(None)
    measured: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        rows = [r for r, f in zip(run["heldout_rows"], facts, strict=True) if f]
        end = None if name == "null only" else recall(run["ref"])
        measured[name] = {"heldout_accuracy": sum(r["correct"] for r in rows) / len(rows),
                         "recall_at_1_start": None if name == "null only" else start,
                         "recall_at_1_end": end,
                         "final_p_null": run["stats"]["heldout_p_null"],
                         "final_retrieval_utility": run["stats"]["heldout_retrieval_utility"],
                         "wall_seconds": run["stats"]["wall_seconds"]}
    reader = KnowledgeAugmentedEncoder.from_pretrained(str(Path(runs["REALM"]["ref"].path) / "reader")).to(device)
    oracle, unretrieved = gold_block_accuracy(reader, scored, gold, blocks, tokenizer, cfg.pretrain.reader_length)
    measured["oracle block"] = {"heldout_accuracy": oracle,
                                "recall_at_1_start": 1.0, "recall_at_1_end": 1.0}  # given the gold block
    # the same trained reader with retrieval taken away: what REALM's accuracy owes to retrieval
    measured["REALM reader, null block"] = {"heldout_accuracy": unretrieved,
                                            "recall_at_1_start": None, "recall_at_1_end": None}
    p = cfg.pretrain
    return {
        "question": "does REALM's gradient teach retrieval and reading where the answer is known?",
        "machine": platform.machine(), "device": device_name(device), "torch": torch.__version__,
        "corpus": {**corpus.summary(), "seed": seed, "distractors": distractors, "blocks": len(blocks),
                   "path": str(path)},
        "systems": measured, "prior_accuracy": prior_accuracy(train, scored),
        "train_examples": len(train), "heldout_examples": len(scored),
        "heldout_examples_without_a_fact": len(heldout) - len(scored),
        "steps": p.steps, "examples_per_step": p.batch_size, "wall_seconds": round(time.perf_counter() - t0, 1),
        "config": {"top_k": p.top_k, "reader_length": p.reader_length, "learning_rate": p.learning_rate,
                   "retriever_lr_scale": p.retriever_lr_scale, "retriever_frozen_steps": p.retriever_frozen_steps,
                   "refresh_every": p.refresh_every,
                   "reader_mlm_steps": probe.pretrain.reader_mlm.steps, "copy_steps": copy_steps, "warm_start": p.warm_start,
                   "precision": p.precision, "overrides": overrides},
        "curves": {name: {"evals": run["evals"],
                          "steps": [{k: r.get(k) for k in ("step", "loss", "span_accuracy", "p_null",
                                                           "retrieval_utility")} for r in run["steps"]]}
                   for name, run in runs.items()},
    }


def device_name(device: Any) -> str:
    """What the runs trained on: the accelerator's name, or `cpu`."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entities", type=int, default=2000, help="fictional entities, two documents each")
    ap.add_argument("--distractors", type=int, default=400, help="spanless documents that share name pieces")
    ap.add_argument("--seed", type=int, default=0, help="the corpus's seed")
    ap.add_argument("--root", default=None, help="store and corpus folder (default: $REALM_WORK_DIR/mechanism)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help=PARAMETER_DOCS["overrides"])
    ap.add_argument("--copy-steps", type=int, default=0,
                    help="start every system from the warm-up reader copy-trained this many steps on the gold "
                         "blocks (0: from the warm-up reader, as REALM does)")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"which pretraining runs, REALM first (default: all of {', '.join(SYSTEMS)}); the oracle "
                         "block and the REALM reader without retrieval are always measured")
    ap.add_argument("--name", default="realm_mechanism", help="experiments/results/<name>.json")
    ap.add_argument("--out", type=Path, default=None, help="write the result here instead (bench/gpu_run.py)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    root = Path(args.root) if args.root else work_dir() / "mechanism"
    result = run_mechanism(args.entities, args.distractors, args.seed, args.overrides, root,
                           systems=tuple(s.strip() for s in args.systems.split(",")), copy_steps=args.copy_steps)
    for name, s in result["systems"].items():
        print(f"{name:18s} held-out accuracy {s['heldout_accuracy']:.3f}  recall@1 "
              f"{s['recall_at_1_start']} -> {s['recall_at_1_end']}")
    print(f"prior {result['prior_accuracy']:.3f} on {result['heldout_examples']} held-out examples")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    else:
        write_result(args.name, result)


if __name__ == "__main__":
    main()
