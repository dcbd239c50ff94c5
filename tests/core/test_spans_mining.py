import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from span_quality import evaluate

from realm_core.bert import load_tokenizer, load_wordpieces, tokenizer_hash
from realm_core.config import BUNDLED_ENCODER, MaskingConfig, SpanConfig
from realm_core.errors import ArtifactError
from realm_core.spans.masking import iter_examples
from realm_core.spans.mining import (
    SpanShardJob,
    block_rows,
    mine_shard,
    run_mine_spans,
    sentence_spans,
    wordpiece_range,
)
from realm_core.store.artifacts import ArtifactStore

FIXTURE = Path(__file__).parents[1] / "fixtures" / "salient_spans_gold.jsonl"
LABELS = frozenset(SpanConfig().entity_labels)


def test_sentence_spans_and_wordpiece_ranges() -> None:
    text = "Ada Lovelace wrote notes.  In 1843 she published them."
    assert sentence_spans(text) == [(0, 25), (27, 54)]
    offsets = [(0, 3), (4, 8), (8, 12), (13, 18)]  # "Ada", "Love", "##lace", "wrote"
    assert wordpiece_range(offsets, 4, 12) == (1, 3)
    assert wordpiece_range(offsets, 0, 12) == (0, 3)


def test_block_rows_merge_ner_and_dates_exactly() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    text = "Ada Lovelace met Charles Babbage. On 5 June 1833 they met in London."
    ents = [(0, 12, "PERSON"), (17, 32, "PERSON"), (37, 48, "DATE"), (61, 67, "GPE"),
            (34, 36, "CARDINAL")]
    offsets = load_wordpieces(BUNDLED_ENCODER).encode(text, add_special_tokens=False).offsets
    stats: Counter[str] = Counter()
    sents, spans = block_rows(9, text, ents, offsets, LABELS, stats)
    assert [(s["sentence"], s["char_start"], s["char_end"]) for s in sents] == [(0, 0, 33), (1, 34, 68)]
    got = [(p["text"], p["sentence"], p["label"], p["source"], p["sources"]) for p in spans]
    # spaCy's DATE and CARDINAL are not in the kept labels: the regex finds the date
    assert got == [("Ada Lovelace", 0, "PERSON", "ner", "ner"),
                   ("Charles Babbage", 0, "PERSON", "ner", "ner"),
                   ("5 June 1833", 1, "DATE", "date", "date"),
                   ("London", 1, "GPE", "ner", "ner")]
    babbage = spans[1]
    pieces = tok.convert_ids_to_tokens(
        tok(text, add_special_tokens=False)["input_ids"][babbage["wp_start"]:babbage["wp_end"]])
    assert tok.convert_tokens_to_string(pieces) == "charles babbage"
    assert stats["sentences"] == 2 and stats["sentences_with_span"] == 2


def test_overlap_records_both_sources() -> None:
    text = "The Battle of 1066 ended it."
    offsets = load_wordpieces(BUNDLED_ENCODER).encode(text, add_special_tokens=False).offsets
    _, spans = block_rows(0, text, [(0, 18, "EVENT")], offsets, LABELS, Counter())
    assert [(p["text"], p["source"], p["sources"]) for p in spans] == [
        ("The Battle of 1066", "ner", "date,ner")]


def _blocks(store: ArtifactStore, texts: list[str]) -> object:
    rows = [{"block_id": i, "doc_id": f"d:{i}", "title": "T", "text": t, "n_wordpieces": 5,
             "char_start": 0, "char_end": len(t)} for i, t in enumerate(texts)]
    with store.write("blocks", "b", config={}, config_hash="c", inputs={}) as w:
        w.table("blocks").write(rows)
        w.extra_manifest["tokenizer"] = {"encoder": BUNDLED_ENCODER, "hash": tokenizer_hash(BUNDLED_ENCODER),
                                         "vocab_size": 30522}
    return store.lookup("blocks", "b").ref


def test_mining_counts_empty_blocks_and_builds_examples(store: ArtifactStore) -> None:
    ref = _blocks(store, ["Barack Obama was born in Honolulu in 1961.", "   ", "",
                          "Paris is the capital of France."])
    result = run_mine_spans(store, ref, SpanConfig(n_process=1))
    assert result.stats["empty_blocks"] == 2 and result.stats["blocks"] == 4
    spans = store.open(result.ref).read_table("salient_spans").to_pylist()
    assert {(s["block_id"], s["text"]) for s in spans} >= {(0, "Barack Obama"), (0, "Honolulu"),
                                                           (0, "1961"), (3, "Paris"), (3, "France")}
    tok = load_tokenizer(BUNDLED_ENCODER)
    examples = list(iter_examples(store.open(ref), store.open(result.ref),
                                  MaskingConfig(query_length=32), tok))
    assert [e.block_id for e in examples] == [0, 3]
    first = examples[0]
    masked = tok.convert_tokens_to_string(tok.convert_ids_to_tokens(first.targets))
    assert masked in {"barack obama", "honolulu", "1961"}


TEXTS = ["Barack Obama was born in Honolulu in 1961.", "   ", "Paris is the capital of France.",
         "Marie Curie moved to Paris in 1891. She won two Nobel Prizes.", "",
         "The Treaty of Versailles was signed on 28 June 1919."]


def test_sharded_mining_streams_shards_and_writes_the_one_process_rows(store: ArtifactStore) -> None:
    ref = _blocks(store, TEXTS)
    one = store.open(run_mine_spans(store, ref, SpanConfig(n_process=1)).ref)
    seen: list[list[str]] = []

    def map_shards(jobs: list[SpanShardJob]) -> Iterator[dict[str, object]]:
        # as a Dask worker would, one shard at a time; the stage must have appended and removed
        # every earlier shard before the next one is mined
        for job in jobs:
            seen.append(sorted(p.name for p in Path(job.directory).glob("*.parquet"))
                        if Path(job.directory).exists() else [])
            yield mine_shard(job)

    sharded = run_mine_spans(store, ref, SpanConfig(n_process=1, shard_size=2), force=True, map_shards=map_shards)
    assert seen == [[], [], []]  # 6 blocks in shards of 2, each consumed before the next
    art = store.open(sharded.ref)
    for table in ("sentences", "salient_spans"):
        assert art.read_table(table).to_pylist() == one.read_table(table).to_pylist()
    assert sharded.stats == {k: v for k, v in one.manifest["stats"].items()}
    assert not any("_shards" in f for f in art.manifest["files"])


def test_a_shard_that_comes_back_out_of_order_fails_the_stage(store: ArtifactStore) -> None:
    ref = _blocks(store, TEXTS)

    def reversed_shards(jobs: list[SpanShardJob]) -> Iterator[dict[str, object]]:
        yield from (mine_shard(job) for job in reversed(jobs))

    with pytest.raises(ArtifactError, match="out of order"):
        run_mine_spans(store, ref, SpanConfig(n_process=1, shard_size=2), map_shards=reversed_shards)
    assert not (Path(store.root) / "salient_spans").exists()


def test_blocks_with_missing_column_or_unknown_version(store: ArtifactStore) -> None:
    ref = _blocks(store, ["Some text."])
    part = Path(ref.path) / "blocks" / "part-00000.parquet"
    pq.write_table(pq.read_table(part).drop(["text"]), part)
    with pytest.raises(ArtifactError, match=r"lacks columns \['text'\]"):
        run_mine_spans(store, ref, SpanConfig(n_process=1))
    manifest = Path(ref.path) / "manifest.json"
    m = json.loads(manifest.read_text())
    m["schema_version"] = 7
    manifest.write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="schema version 7"):
        run_mine_spans(store, ref, SpanConfig(n_process=1))
    assert not (Path(store.root) / "salient_spans").exists()


def test_quality_on_hand_labelled_sentences() -> None:
    scores = evaluate(FIXTURE, "en_core_web_sm", LABELS)
    assert scores["all"].sentences == 62 and scores["all"].gold == 176
    # floors under the measured values (README): a regression in NER use or the regexes trips them
    assert scores["date"].recall >= 0.90 and scores["date"].precision >= 0.90
    assert scores["entity"].recall >= 0.70 and scores["entity"].overlap_recall >= 0.80
    assert scores["all"].precision >= 0.80


def test_a_doc_stream_that_ends_early_is_an_error_not_a_shorter_artifact() -> None:
    """Every block sent to spaCy must come back; spaCy's shutdown warning W127 is counted, other
    warnings still reach the user."""
    import warnings
    from collections import deque

    from realm_core.spans.mining import count_worker_exits, load_ner, mine_docs

    nlp = load_ner("en_core_web_sm")
    backend = load_wordpieces(BUNDLED_ENCODER)
    docs = list(nlp.pipe(["Paris is in France.", "Rome is in Italy."]))
    stats: Counter[str] = Counter()
    rows = list(mine_docs(iter(docs), deque([7, 9]), backend, frozenset({"GPE"}), stats))
    assert [r[0][0]["block_id"] for r in rows] == [7, 9]
    with pytest.raises(ArtifactError, match=r"a Doc for 2 of the 3 non-empty blocks sent \(first missing: block 11\)"):
        list(mine_docs(iter(docs), deque([7, 9, 11]), backend, frozenset({"GPE"}), Counter()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("[W127] Not all `Language.pipe` worker processes completed successfully", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    with pytest.warns(UserWarning, match="something else"):
        count_worker_exits(caught, stats)
    assert stats["spacy_worker_exits_nonzero"] == 1
