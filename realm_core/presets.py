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


# Presets are sized from costs measured on a 2-core laptop; the measurements behind each number
# are in README ("Presets" and the stage sections), not here.
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
        "pretrain": {"top_k": 3, "reader_length": 159, "batch_size": 2,
                     "reader_mlm": {"steps": 2, "batch_size": 4, "length": 64, "warmup_steps": 1,
                                    "checkpoint_every": 1},
                     "steps": 4, "warmup_steps": 1, "refresh_every": 2, "sync_refresh": True,
                     "dropout": 0.0, "eval_every": 2, "eval_examples": 8, "checkpoint_every": 2,
                     "log_every": 1},
        # the tiny corpus holds SQuAD articles 0-2 only: retrieval is measured on the two it
        # does not train on (359 questions; articles 30-39, 1,971, are not in its corpus), and,
        # as in the demo, without the two reference rows (tests/core/test_retrieval_eval.py has them)
        "retrieval_eval": {"squad_articles": (1, 2), "reference_rows": False},
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
        # Blocks of REALM's 288 wordpieces, embedded whole for the index. ICT, RetroMAE and the
        # relevance recompute read shorter views of them, for their cost on 2 cores (a config
        # without those three fields gives every stage the one view `block_length` sets).
        "block_length": 288,
        "masking": {"query_length": 64},
        # Every encoder's matrix products in bf16 where the CPU (or GPU) computes bf16 natively
        # (AVX512-BF16, AMX), fp32 elsewhere (README, "bf16 on the CPU": what it gains and what
        # it changes). `--set precision=fp32` gives the runs measured before it.
        "precision": "auto",
        # BM25 and ICT; the two reference rows (two more corpus embeddings) are bench/retrieval.py's.
        "retrieval_eval": {"reference_rows": False},
        # ICT learns from in-batch negatives: many short contexts a batch, not few long ones.
        # 60 steps keep `make demo` within its time (README: what 150 gave).
        "ict": {"batch_size": 256, "steps": 60, "query_length": 32, "block_length": 64,
                "learning_rate": 1e-4, "warmup_steps": 6, "dropout": 0.0},
        # ICT's budget in steps x batch x tokens; README's warm-start table trains each 40 steps.
        "retromae": {"batch_size": 256, "steps": 150, "block_length": 96, "learning_rate": 1e-4,
                     "warmup_steps": 10, "dropout": 0.0},
        # MiniLM ships no MLM head: the reader learns masked LM on the blocks first. The reader
        # reads the masked sentence and the whole 288-wordpiece block (64 + 288 - 1); 40 steps of
        # it cost what 100 of the earlier 128-wordpiece view did, with one refresh. The encoders
        # learn at a tenth of the reader's rate (at the full rate they lost recall; README).
        "pretrain": {"top_k": 4, "reader_length": 351, "batch_size": 8,
                     "reader_mlm": {"steps": 150},
                     "learning_rate": 1e-4, "retriever_lr_scale": 0.1, "steps": 40, "warmup_steps": 4, "refresh_every": 20,
                     "dropout": 0.0, "heldout_every": 10, "eval_every": 100, "eval_examples": 512,
                     "checkpoint_every": 25},
        # The span reader reads each SQuAD-open train question's own paragraph (checkpoint chosen
        # by EM on 300 dev questions' paragraphs); every system starts from it, REALM from its
        # own reader. Its rate was chosen on dev among 1e-4, 2e-4 and 4e-4 (README). Batches of
        # paragraphs of similar length pad less (same dev EM, less time: README). No open-domain
        # phase here (`make openqa-table`). Reader rows of 384 hold the question and a whole
        # block. NQ/WQ/CT: their first 100 test questions (the demo corpus holds few of their
        # answers); form and temperature fit on 200 dev questions.
        "finetune": {"batch_size": 8, "steps": 0, "warmup_steps": 10, "learning_rate": 5e-5, "dropout": 0.0,
                     "gold_passage": {"steps": 300, "batch_size": 16, "learning_rate": 2e-4, "warmup_steps": 30,
                                      "eval_every": 75, "patience": 2, "group_by_length": True},
                     "checkpoint_every": 25},
        "openqa_eval": {"question_limits": {"nq": 100, "wq": 100, "ct": 100}, "calibration_questions": 200},
    },
    "paper": {
        "ingest": {"sources": [{"kind": "wikipedia", "name": "enwiki",
                                "path": "data:enwiki-20181220-pages-articles.xml.bz2"}], "workers": 16},
        "chunk": {"encoder": "bert-base-uncased"},
        # GPUs: bf16 autocast for the matrix products (weights and AdamW stay fp32)
        "embed": {"doc_encoder": "bert-base-uncased", "batch_size": 256, "float16": True, "precision": "bf16"},
        "index": {"factory": "IVF65536,Flat", "ivf_nprobe": 64},
        # ORQA's 4,096 contexts of 288 a step do not fit one device's memory at once: 256 at a
        # time, the loss and gradients still the whole batch's (GradCache); 38 GB on an H200 in
        # bf16, 4.3 s a step on batches tokenised beforehand (bench/results/gpu_ict_run.json)
        "ict": {"encoder": "bert-base-uncased", "micro_batch": 256, "precision": "bf16"},
        "retromae": {"encoder": "bert-base-uncased", "precision": "bf16"},
        "pretrain": {"reader_encoder": "bert-base-uncased", "precision": "bf16"},
    },
}
