"""Presets: the tiny (tests), demo (2-core laptop) and paper (GPUs) values of every stage
config, as plain dicts that `realm_core.config.load_config` validates."""

from __future__ import annotations

from typing import Any


def _bundled_sources(names: list[str], limits: dict[str, int] | None = None) -> list[dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {
        "wiki-gensim": {"kind": "wikipedia", "name": "enwiki",
                        "path": "data:wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"},
        "wiki-tables": {"kind": "wikipedia", "name": "enwiki",
                        "path": "data:wikipedia/enwiki-table-markup.xml.bz2"},
        "wiki-w2v": {"kind": "wikipedia", "name": "enwiki",
                     "path": "data:wikipedia/wikipedia2vec-enwiki-pages-articles-sample.xml.bz2"},
        "squad": {"kind": "squad", "name": "squad", "path": "data:squad/squad-v1.1-dev.articles-00-39.json"},
        "dpr": {"kind": "dpr_json", "name": "dpr", "path": "data:dpr/haystack-dpr-nq-dev-sample.json"},
    }
    out = []
    for n in names:
        spec = dict(files[n])
        if limits and n in limits:
            spec["max_documents"] = limits[n]
        out.append(spec)
    return out


# Presets are sized from costs measured on a 2-core laptop (README "Costs"):
# MiniLM forward 30 seq/s at 288 tokens, so `demo` keeps the corpus near 3-4k blocks.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "ingest": {"sources": _bundled_sources(["wiki-w2v", "wiki-tables", "squad", "dpr"],
                                               {"squad": 3, "dpr": 60}), "workers": 1},
        "block_length": 128,
        "spans": {"n_process": 1},
        "masking": {"query_length": 32},
        "embed": {"batch_size": 16},
        "ict": {"batch_size": 8, "steps": 4, "query_length": 32,
                "dropout": 0.0, "checkpoint_every": 2, "log_every": 1},
        "retromae": {"batch_size": 4, "steps": 4, "block_length": 64, "dropout": 0.0,
                     "checkpoint_every": 2, "log_every": 1},
        "pretrain": {"top_k": 3, "reader_length": 96, "batch_size": 2,
                     "reader_mlm": {"steps": 2, "batch_size": 4, "length": 64, "warmup_steps": 1,
                                    "checkpoint_every": 1},
                     "steps": 4, "warmup_steps": 1, "refresh_every": 2, "sync_refresh": True,
                     "dropout": 0.0, "eval_every": 2, "eval_examples": 8, "checkpoint_every": 2,
                     "log_every": 1},
        # the tiny corpus holds SQuAD articles 0-2 only
        "questions": {"sources": [
            {"kind": "squad", "path": "data:squad/squad-v1.1-dev.articles-00-39.json",
             "dataset": "squad-open", "split": "train", "articles": [0, 0]},
            {"kind": "squad", "path": "data:squad/squad-v1.1-dev.articles-00-39.json",
             "dataset": "squad-open", "split": "dev", "articles": [1, 1]},
            {"kind": "squad", "path": "data:squad/squad-v1.1-dev.articles-00-39.json",
             "dataset": "squad-open", "split": "test", "articles": [2, 2]},
            {"kind": "curatedtrec", "path": "data:openqa/curatedtrec/large2470-test.tsv",
             "dataset": "ct", "split": "test"}]},
        "finetune": {"top_k": 2, "reader_length": 96, "question_length": 32, "batch_size": 2,
                     "steps": 3, "warmup_steps": 1, "learning_rate": 5e-5, "dropout": 0.0,
                     "gold_passage": {"steps": 3, "batch_size": 4, "learning_rate": 1e-4, "warmup_steps": 1,
                                      "eval_every": 2},
                     "dev_questions": 8, "checkpoint_every": 2, "log_every": 1},
        "openqa_eval": {"datasets": ["squad-open", "ct"], "question_limits": {"squad-open": 12, "ct": 6},
                        "answer_candidates": 5, "batch_size": 4, "temperatures": [1.0],
                        "calibration_questions": 8, "bootstrap_resamples": 200},
    },
    "demo": {
        "ingest": {"sources": _bundled_sources(["wiki-gensim", "wiki-tables", "wiki-w2v", "squad", "dpr"])},
        # Blocks of 288 wordpieces (REALM's), embedded whole for the index. Three stages read a
        # shorter view of them, each for its cost on 2 cores, each recorded in its manifest: ICT
        # 64 (in-batch negatives want many short contexts; 288 would cost about 4x a step),
        # RetroMAE 96, and pretraining's relevance recompute 128 (the document encoder's forward
        # and backward over 8 x 3 blocks a step). A config without those three fields gives every
        # stage the one view `block_length` sets.
        "block_length": 288,
        "masking": {"query_length": 64},
        # In-batch negatives are what ICT learns from: many short contexts per batch rather
        # than few long ones. About 7 s/step on 2 cores; no dropout (it doubles a step).
        # SQuAD-open R@5 by (steps, lr): (100, 5e-5) 0.555, (150, 5e-5) 0.577, (200, 5e-5) 0.578,
        # (150, 1e-4) 0.587.
        "ict": {"batch_size": 256, "steps": 150, "query_length": 32, "block_length": 64,
                "learning_rate": 1e-4, "warmup_steps": 10, "dropout": 0.0},
        # ICT's budget in steps x batch x tokens (150 x 256 x 96). The decoder's full-vocabulary
        # loss at every position makes a step cost far more than ICT's: 45 s on 2 quiet cores (the
        # train column of README's table). README's comparison trains every warm start
        # 40 steps (`make warm-start-table`); the full 150 is a GPU run.
        "retromae": {"batch_size": 256, "steps": 150, "block_length": 96, "learning_rate": 1e-4,
                     "warmup_steps": 10, "dropout": 0.0},
        # about 2.5 s/step on 2 cores (8 x 4 reader sequences of 128, 24 blocks re-embedded).
        # The encoders learn at a tenth of the reader's rate: at the full rate 150 steps of a
        # reader that barely uses retrieval yet halved the ICT retriever's open-QA recall@5.
        # MiniLM ships no MLM head, so the reader first learns masked LM on the blocks (300 steps
        # of 32 x 128); without it 150 steps left held-out span accuracy at 1/128 with retrieval
        # and without. One article in 10 is held out, 512 of its masked spans evaluated.
        "pretrain": {"top_k": 4, "reader_length": 128, "doc_length": 128, "batch_size": 8,
                     "reader_mlm": {"steps": 300},
                     "learning_rate": 1e-4, "retriever_lr_scale": 0.1, "steps": 150, "warmup_steps": 15, "refresh_every": 50,
                     "dropout": 0.0, "heldout_every": 10, "eval_every": 50, "eval_examples": 512,
                     "checkpoint_every": 25},
        # The span reader reads each SQuAD-open train question's own paragraph first (one
        # paragraph a question, about 3 s per step of 16 on 2 cores), the checkpoint chosen by
        # EM on 300 dev questions' paragraphs; every system starts from it (REALM from its own
        # reader). The demo runs no open-domain phase (steps 0): `make openqa-table` does.
        # Reader rows of 384 wordpieces hold the question and a whole 288-wordpiece block.
        # NQ/WQ/CT: the first 200 test questions (their answers are mostly not in a 4k-block
        # corpus; the answerable subset is reported beside the full split).
        "finetune": {"batch_size": 8, "steps": 0, "warmup_steps": 10, "learning_rate": 5e-5, "dropout": 0.0,
                     "gold_passage": {"steps": 300, "batch_size": 16, "learning_rate": 1e-4, "warmup_steps": 30,
                                      "eval_every": 75, "patience": 2},
                     "checkpoint_every": 25},
        "openqa_eval": {"question_limits": {"nq": 200, "wq": 200, "ct": 200}},
    },
    "paper": {
        "ingest": {"sources": [{"kind": "wikipedia", "name": "enwiki",
                                "path": "data:enwiki-20181220-pages-articles.xml.bz2"}], "workers": 16},
        "chunk": {"encoder": "bert-base-uncased"},
        # GPUs: bf16 autocast for the matrix products (weights and AdamW stay fp32)
        "embed": {"doc_encoder": "bert-base-uncased", "batch_size": 256, "float16": True, "precision": "bf16"},
        "index": {"factory": "IVF65536,Flat", "ivf_nprobe": 64},
        "ict": {"encoder": "bert-base-uncased"},
        "pretrain": {"reader_encoder": "bert-base-uncased", "precision": "bf16"},
    },
}
