"""Arrow schemas of the Parquet artifacts, versioned. A reader refuses an unknown version."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class TableSchema:
    kind: str
    version: int
    schema: pa.Schema

    @property
    def required(self) -> list[str]:
        return [f.name for f in self.schema]


DOCUMENTS = TableSchema("documents", 1, pa.schema([
    ("doc_id", pa.string()),       # unique across sources: "<source name>:<native id>"
    ("title", pa.string()),
    ("text", pa.string()),         # clean text; paragraphs separated by "\n\n"
    ("source", pa.string()),       # source name, e.g. "enwiki", "squad"
    ("source_file", pa.string()),
    ("page_id", pa.int64()),       # MediaWiki page id (null for other corpora)
    ("revision_id", pa.int64()),   # MediaWiki revision id (null for other corpora)
]))

BLOCKS = TableSchema("blocks", 1, pa.schema([
    ("block_id", pa.int64()),      # dense 0..N-1, the row of the block's embedding
    ("doc_id", pa.string()),
    ("title", pa.string()),
    ("text", pa.string()),         # the body: document.text[char_start:char_end]
    ("n_wordpieces", pa.int32()),  # [CLS] title [SEP] body [SEP], specials included
    ("char_start", pa.int64()),
    ("char_end", pa.int64()),
]))

SENTENCES = TableSchema("sentences", 1, pa.schema([
    ("block_id", pa.int64()),
    ("sentence", pa.int32()),      # index within the block
    ("char_start", pa.int64()),    # into the block text
    ("char_end", pa.int64()),
]))

SALIENT_SPANS = TableSchema("salient_spans", 1, pa.schema([
    ("block_id", pa.int64()),
    ("sentence", pa.int32()),
    ("char_start", pa.int64()),    # into the block text
    ("char_end", pa.int64()),
    ("wp_start", pa.int32()),      # into the block text's wordpieces (no special tokens)
    ("wp_end", pa.int32()),
    ("text", pa.string()),
    ("label", pa.string()),        # spaCy entity label, or DATE
    ("source", pa.string()),       # the winning span's source: ner | date
    ("sources", pa.string()),      # every source that found an overlapping span, e.g. "date,ner"
]))

ICT_CURVE = TableSchema("ict_curve", 1, pa.schema([
    ("step", pa.int64()),
    ("loss", pa.float64()),        # in-batch cross-entropy
    ("accuracy", pa.float64()),    # in-batch top-1: the query's own block ranked first
    ("learning_rate", pa.float64()),
    ("seconds", pa.float64()),     # since the (resumed) run began
]))

RETRIEVAL_RESULTS = TableSchema("retrieval_results", 1, pa.schema([
    ("dataset", pa.string()),
    ("system", pa.string()),
    ("qid", pa.string()),
    ("question", pa.string()),
    ("first_hit", pa.int32()),     # 1-based rank of the first block holding an answer; 0: none
    ("top_block_ids", pa.list_(pa.int64())),
]))

QUESTIONS = TableSchema("questions", 2, pa.schema([
    ("dataset", pa.string()),      # nq, wq, ct, squad-open, ...
    ("split", pa.string()),        # train | dev | test
    ("qid", pa.string()),
    ("question", pa.string()),
    ("answers", pa.list_(pa.string())),
    ("match", pa.string()),        # text (normalised exact match) | regex (CuratedTREC)
    ("title", pa.string()),        # SQuAD: the article title of the gold paragraph; else null
    ("context", pa.string()),      # SQuAD: the gold paragraph (the reader's ceiling); else null
]))

PRETRAIN_METRICS = TableSchema("pretrain_metrics", 4, pa.schema([
    ("step", pa.int64()),
    ("loss", pa.float64()),              # -log p(y|x), mean over the batch
    ("span_accuracy", pa.float64()),     # masked spans predicted exactly (marginal argmax)
    ("log_likelihood", pa.float64()),
    ("p_null", pa.float64()),            # mean p(z = null | x)
    ("retrieval_utility", pa.float64()), # REALM §4.5: log p(y|x,z_best) - log p(y|x,null)
    ("answer_retrieved", pa.float64()),  # share of examples whose span a retrieved block holds
    ("p_holder", pa.float64()),          # mean p(z|x) on retrieved blocks that hold the span
    ("learning_rate", pa.float64()),
    ("index_step", pa.int64()),          # retriever step of the index in use
    ("staleness", pa.int64()),           # retriever steps since that index was built
    ("steps_per_s", pa.float64()),
    ("blocked_s", pa.float64()),         # cumulative seconds the loop waited on the index
    ("retriever_trained", pa.float64()), # 1: the step's update reached the encoders
]))

PRETRAIN_EVAL = TableSchema("pretrain_eval", 3, pa.schema([
    ("step", pa.int64()),
    ("span_accuracy", pa.float64()),
    ("log_likelihood", pa.float64()),
    ("p_null", pa.float64()),
    ("retrieval_utility", pa.float64()),
    ("answer_retrieved", pa.float64()),  # share of held-out examples whose span a retrieved block holds
    ("p_holder", pa.float64()),          # mean p(z|x) on retrieved blocks that hold the span
    ("examples", pa.int64()),
]))

READER_MLM_METRICS = TableSchema("reader_mlm_metrics", 1, pa.schema([
    ("step", pa.int64()),
    ("loss", pa.float64()),                # mean -log p of the chosen wordpieces
    ("wordpiece_accuracy", pa.float64()),  # chosen wordpieces predicted right (argmax)
    ("learning_rate", pa.float64()),
]))

FINETUNE_CURVE = TableSchema("finetune_curve", 3, pa.schema([
    ("phase", pa.string()),          # gold_passage | open (the system's own retrieval)
    ("step", pa.int64()),
    ("loss", pa.float64()),          # -log p(y|x) over the batch; NaN: no question had a gold span
    ("learning_rate", pa.float64()),
    ("with_gold", pa.float64()),     # share of the batch's questions whose top-k held an answer
    ("questions", pa.int64()),       # questions trained on this step
    ("no_gold_span", pa.int64()),    # of those, answer text retrieved but no span within the span
                                     # limit matches as whole wordpieces (they teach nothing)
    ("dev_em", pa.float64()),        # dev exact match where evaluated, else null
    ("row_tokens", pa.int64()),      # reader-row positions computed this step, padding included
    ("wall_seconds", pa.float64()),  # since the phase started (resumes included)
]))

OPENQA_PREDICTIONS = TableSchema("openqa_predictions", 2, pa.schema([
    ("dataset", pa.string()),
    ("split", pa.string()),
    ("system", pa.string()),
    ("qid", pa.string()),
    ("question", pa.string()),
    ("answers", pa.list_(pa.string())),
    ("predicted", pa.string()),
    ("score", pa.float64()),             # p(predicted|x) summed over its spans
    ("correct", pa.bool_()),             # exact match (normalised), regex match for CuratedTREC
    ("answer_retrieved", pa.bool_()),    # a gold answer occurs in a retrieved block
    ("answerable", pa.bool_()),          # a gold answer occurs in some block of the corpus
    ("block_ids", pa.list_(pa.int64())),
    ("answer_rank", pa.int64()),         # rank (1-based) of the first retrieved block holding an answer; null: none
    ("answer_read", pa.bool_()),         # a gold answer occurs in the text the reader read
    ("f1", pa.float64()),                # SQuAD token F1 (regex datasets: equals correct)
]))

RETROMAE_CURVE = TableSchema("retromae_curve", 1, pa.schema([
    ("step", pa.int64()),
    ("loss", pa.float64()),            # encoder MLM + decoder reconstruction
    ("encoder_loss", pa.float64()),
    ("decoder_loss", pa.float64()),
    ("learning_rate", pa.float64()),
    ("seconds", pa.float64()),
]))

PRETRAIN_HELDOUT = TableSchema("pretrain_heldout", 2, pa.schema([
    ("example", pa.int64()),      # position in the held-out test (drawn at random, pretrain.seed)
    ("doc_id", pa.string()),      # the article: held-out articles never train
    ("block_id", pa.int64()),     # the block the masked sentence comes from
    ("correct", pa.bool_()),      # every masked wordpiece predicted (marginal argmax), last eval
    ("log_p", pa.float64()),      # log p(y|x) at the last eval
    ("recoverable", pa.bool_()),  # the span occurs in a block that is not a trivial retrieval
    ("answer_retrieved", pa.bool_()),  # a block retrieved for it at the last eval holds the span
]))

SCHEMAS: dict[str, TableSchema] = {s.kind: s for s in (DOCUMENTS, BLOCKS, SENTENCES, SALIENT_SPANS,
                                                       ICT_CURVE, RETRIEVAL_RESULTS, QUESTIONS,
                                                       PRETRAIN_METRICS, PRETRAIN_EVAL, PRETRAIN_HELDOUT,
                                                       READER_MLM_METRICS, FINETUNE_CURVE,
                                                       OPENQA_PREDICTIONS, RETROMAE_CURVE)}
