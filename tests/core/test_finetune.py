"""Open-QA fine-tuning on a tiny random BERT (the bundled vocabulary): reader rows, learning,
exact resume, prediction back to the block's own text, answer matching."""

from pathlib import Path

import numpy as np
import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import FinetuneConfig, ReaderBudget
from realm_core.errors import InputError
from realm_core.openqa.evaluation import ReadMemo, ReadOnce, _check_regexes, answerable
from realm_core.openqa.finetune import epoch_batch, length_grouped_epoch, train_reader
from realm_core.openqa.predict import Prediction, QAModels, answer_correct, fit_temperature, predict
from realm_core.openqa.reading import (
    BlockStore,
    QAQuestion,
    gold_row_lengths,
    reader_rows,
)
from realm_core.openqa.span_reader import SpanReader
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.retrievers import BM25, Dense, GoldPassage, Retriever
from realm_core.retrieval.stage import encoder_hash

TITLES = ["France", "Germany", "Italy", "Zürich", "Spain", "Japan"]
TEXTS = ["Paris is the capital and largest city of France.",
         "Berlin is the capital of Germany; its river is the Spree.",
         "Rome, the capital of Italy, was founded in 753 BC.",
         "Zürich is the largest city in Switzerland, on Lake Zürich.",
         "Madrid is the capital of Spain and hosts the Prado.",
         "Tokyo became the capital of Japan in 1868."]
QUESTIONS = [QAQuestion("q0", "What is the capital of France?", ("Paris",)),
             QAQuestion("q1", "Which river flows through the capital of Germany?", ("Spree", "the Spree")),
             QAQuestion("q2", "When was the capital of Italy founded?", ("753 BC",)),
             QAQuestion("q3", "Which museum is in the capital of Spain?", ("Prado",))]


def _config(**kw: object) -> FinetuneConfig:
    base = {"top_k": 2, "reader_length": 48, "question_length": 24, "max_span_length": 4, "batch_size": 2,
            "learning_rate": 3e-3, "query_learning_rate": 3e-3, "warmup_steps": 0, "steps": 40, "dropout": 0.0,
            "checkpoint_every": 10, "form": "per_block"}
    return FinetuneConfig(**(base | kw))


def _answers(models: QAModels, retriever: Retriever, blocks: BlockStore, tok: object, config: FinetuneConfig,
             temperature: float | None = None) -> list[Prediction]:
    return predict(models, retriever, QUESTIONS, blocks, tok, config, 10, 4, temperatures=(temperature,))[temperature]


def _setup(tiny_bert: str, kind: str) -> tuple[QAModels, Retriever, BlockStore, object]:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    reader = SpanReader.from_pretrained(tiny_bert, 4, seed=0)
    if kind == "bm25":
        return QAModels(reader, None), BM25(blocks, 2), blocks, tok
    query = RetrieverEncoder.from_pretrained(tiny_bert, projection_dim=8, seed=0)
    docs = RetrieverEncoder.from_pretrained(tiny_bert, projection_dim=8, seed=0).eval()
    enc = tok([f"{t} {b}" for t, b in zip(TITLES, TEXTS, strict=True)], padding=True, return_tensors="pt")
    with torch.no_grad():
        vectors = docs(enc["input_ids"], enc["attention_mask"]).numpy()
    return QAModels(reader, query), Dense(blocks, 2, query, tok, vectors, 24), blocks, tok


def test_reader_rows_mark_the_body_and_map_back_to_its_characters(tiny_bert: str) -> None:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    q = tok("What is the capital?")["input_ids"]
    rows = reader_rows([q], np.array([[0, 3]]), blocks, 64, tok.sep_token_id, tok.pad_token_id)
    for j, z in enumerate((0, 3)):
        ids = rows.input_ids[0, j][rows.body_mask[0, j]].tolist()
        assert ids == blocks.pieces(z)[1][:rows.body_len[0][j]]
        assert rows.input_ids[0, j, rows.body_start[0][j] - 1] == tok.sep_token_id  # title [SEP] body
    # offsets give the original characters back, accents and case included
    _, body, offsets = blocks.pieces(3)
    assert TEXTS[3][offsets[0][0]:offsets[0][1]] == "Zürich"  # one wordpiece, "zurich"
    assert TEXTS[3][offsets[0][0]:offsets[2][1]] == "Zürich is the"


@pytest.mark.parametrize(("kind", "form"), [("bm25", "per_block"), ("dense", "per_block"), ("bm25", "joint")])
def test_finetuning_learns_to_answer_and_trains_only_the_query_side(tiny_bert: str, kind: str, form: str,
                                                                   tmp_path: Path) -> None:
    models, retriever, blocks, tok = _setup(tiny_bert, kind)
    config = _config(form=form)
    temperature = config.train_temperature(retriever.name)
    before = _answers(models, retriever, blocks, tok, config, temperature)
    vectors = retriever.vectors.clone() if isinstance(retriever, Dense) else None
    query_before = None if models.query_encoder is None else models.query_encoder.projection.weight.clone()
    curves = train_reader(models, retriever, QUESTIONS, blocks, tok, config, config.budget(), tmp_path,
                          query_learning_rate=config.query_rate())
    after = _answers(models, retriever, blocks, tok, config, temperature)
    losses = [r["loss"] for r in curves.steps if r["loss"] == r["loss"]]
    assert np.mean(losses[-5:]) < losses[0] / 1.8, [round(x, 2) for x in losses]
    answerable_now = [q for q, p in zip(QUESTIONS, after, strict=True)
                      if any(blocks.holds_answer(q, z) for z in p.block_ids)]
    assert answerable_now, "the retriever should find some answers on this corpus"
    correct_after = sum(answer_correct(p.answer, q) for q, p in zip(QUESTIONS, after, strict=True))
    correct_before = sum(answer_correct(p.answer, q) for q, p in zip(QUESTIONS, before, strict=True))
    assert correct_after == len(answerable_now) > correct_before
    if isinstance(retriever, Dense):
        assert torch.equal(retriever.vectors, vectors)  # the document side is frozen
        assert not torch.equal(models.query_encoder.projection.weight, query_before)


def test_killed_finetuning_resumes_to_the_same_parameters(tiny_bert: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(steps=6, checkpoint_every=2)
    models, retriever, blocks, tok = _setup(tiny_bert, "dense")
    train_reader(models, retriever, QUESTIONS, blocks, tok, config, config.budget(), tmp_path / "straight",
                 query_learning_rate=config.query_rate())
    straight = {k: v.clone() for k, v in models.reader.state_dict().items()}
    straight_q = {k: v.clone() for k, v in models.query_encoder.state_dict().items()}

    import realm_core.openqa.finetune as ft

    real_save = ft.save_checkpoint

    def save_then_die(root: Path, step: int, *args: object, **kw: object) -> Path:
        path = real_save(root, step, *args, **kw)  # type: ignore[arg-type]
        if step == 4:
            raise KeyboardInterrupt("killed after the step-4 checkpoint")
        return path

    models, retriever, blocks, tok = _setup(tiny_bert, "dense")
    monkeypatch.setattr(ft, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_reader(models, retriever, QUESTIONS, blocks, tok, config, config.budget(), tmp_path / "killed",
                     query_learning_rate=config.query_rate())
    monkeypatch.setattr(ft, "save_checkpoint", real_save)
    models, retriever, blocks, tok = _setup(tiny_bert, "dense")  # a fresh process's models
    curves = train_reader(models, retriever, QUESTIONS, blocks, tok, config, config.budget(), tmp_path / "killed",
                          query_learning_rate=config.query_rate())
    assert [r["step"] for r in curves.steps] == [1, 2, 3, 4, 5, 6]
    for k, v in models.reader.state_dict().items():
        assert torch.allclose(v, straight[k], atol=1e-6), k
    for k, v in models.query_encoder.state_dict().items():
        assert torch.allclose(v, straight_q[k], atol=1e-6), k


def test_systems_sharing_a_reader_read_each_row_once_with_the_same_answers(tiny_bert: str, tmp_path: Path) -> None:
    """The evaluation's memo: a second system whose reader is a copy (its own saved directory, as
    two systems' artifacts are) reads only the rows the first did not, and answers as it would
    alone; a reader with other weights shares nothing. Keys are the directories' hashes, as in
    the evaluation."""
    models, dense, blocks, tok = _setup(tiny_bert, "dense")
    bm25, config = BM25(blocks, 2), _config()
    alone = {r.name: predict(models, r, QUESTIONS, blocks, tok, config, 10, 3)[None] for r in (bm25, dense)}
    for name in ("one", "copy"):
        models.reader.save_pretrained(tmp_path / name)
    SpanReader.from_pretrained(tiny_bert, 4, seed=1).save_pretrained(tmp_path / "other")
    key = {name: encoder_hash(str(tmp_path / name)) for name in ("one", "copy", "other")}
    assert key["one"] == key["copy"] != key["other"]
    memo = ReadMemo()
    first = predict(QAModels(ReadOnce(models.reader, memo, key["one"]), None), bm25, QUESTIONS, blocks, tok, config,
                    10, 3)[None]
    assert (memo.read, memo.reused) == (len(QUESTIONS) * 2, 0)
    twin = SpanReader.from_pretrained(str(tmp_path / "copy"), 4)
    second = predict(QAModels(ReadOnce(twin, memo, key["copy"]), models.query_encoder), dense, QUESTIONS, blocks,
                     tok, config, 10, 3)[None]
    shared = sum(len({int(z) for z in bm25.propose([q]).ids[0]} & {int(z) for z in dense.propose([q]).ids[0]})
                 for q in QUESTIONS)
    assert shared > 0 and memo.reused == shared and memo.read == 2 * len(QUESTIONS) * 2 - shared
    for got, want in ((first, alone[bm25.name]), (second, alone[dense.name])):
        assert [(p.answer, p.block_ids) for p in got] == [(p.answer, p.block_ids) for p in want]
        assert [p.score for p in got] == pytest.approx([p.score for p in want], rel=1e-5)
    read = memo.read
    other = SpanReader.from_pretrained(str(tmp_path / "other"), 4)
    predict(QAModels(ReadOnce(other, memo, key["other"]), None), bm25, QUESTIONS, blocks, tok, config, 10, 3)
    assert memo.read == read + len(QUESTIONS) * 2
    held = len(memo.scores)
    memo.forget(key["one"])  # the evaluation frees a reader's rows once no later system reads with it
    assert len(memo.scores) == held - (2 * len(QUESTIONS) * 2 - shared)
    assert {k[0] for k in memo.scores} == {key["other"]}


def test_no_retrieval_has_nothing_to_extract(tiny_bert: str) -> None:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    models = QAModels(SpanReader.from_pretrained(tiny_bert, 4), None)
    preds = _answers(models, Retriever(blocks, 5), blocks, tok, _config())
    assert [(p.answer, p.block_ids) for p in preds] == [("", [])] * len(QUESTIONS)


def test_answer_matching_exact_and_regex() -> None:
    assert answer_correct("the Spree", QAQuestion("a", "?", ("Spree",)))
    assert not answer_correct("Spree river", QAQuestion("a", "?", ("Spree",)))
    trec = QAQuestion("b", "?", (r"Ja(ck|mes) Nicholson",), "regex")
    assert answer_correct("jack nicholson", trec)  # case-insensitive, anchored at the start
    assert not answer_correct("actor Jack Nicholson", trec)


def test_answerable_means_some_block_holds_an_answer(tiny_bert: str) -> None:
    blocks = BlockStore(TITLES, TEXTS, load_tokenizer(tiny_bert))
    qs = [QAQuestion("a", "?", ("Lake Zürich",)), QAQuestion("b", "?", ("Lyon",)),
          QAQuestion("c", "?", (r"17\d\d BC",), "regex"), QAQuestion("d", "?", ("city of",))]
    assert answerable(qs, blocks) == [True, False, False, True]


def test_an_invalid_curatedtrec_regex_is_refused_naming_the_question() -> None:
    with pytest.raises(InputError, match=r"questions.*q7.*valid answer regexes"):
        _check_regexes([QAQuestion("q7", "?", ("(unclosed",), "regex")], "questions")


def test_epoch_batches_see_every_question_once_per_epoch() -> None:
    seen = [i for step in range(5) for i in epoch_batch(10, 4, seed=3, step=step)]  # 2 epochs
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    assert epoch_batch(10, 4, 3, 2) == epoch_batch(10, 4, 3, 2)  # a function of (seed, step)
    assert sorted(epoch_batch(3, 8, 0, 0)) == [0, 1, 2]  # a batch larger than the set: each once


def test_length_grouped_batches_see_every_question_once_and_pad_less() -> None:
    lengths = [int(x) for x in np.random.default_rng(0).integers(20, 380, size=1000)]
    batches = length_grouped_epoch(lengths, 16, seed=3, epoch=0, pool=10)
    assert len(batches) == 63 and sorted(i for b in batches for i in b) == list(range(1000))
    assert batches == length_grouped_epoch(lengths, 16, seed=3, epoch=0, pool=10)  # a function of (seed, epoch)
    assert batches != length_grouped_epoch(lengths, 16, seed=3, epoch=1, pool=10)
    padded = np.mean([max(lengths[i] for i in b) for b in batches])
    shuffled = np.mean([max(lengths[i] for i in b) for b in (epoch_batch(1000, 16, 3, s) for s in range(62))])
    assert padded < 0.75 * shuffled  # rows pad to their own batch's longest: less padding
    # epoch_batch with lengths walks these batches, epoch after epoch
    steps = [epoch_batch(1000, 16, 0, s, lengths) for s in range(2 * 63)]
    assert steps[:63] == length_grouped_epoch(lengths, 16, 0, 0) and steps[63:] == length_grouped_epoch(lengths, 16, 0, 1)


def test_gold_row_lengths_follow_reader_rows_and_need_a_passage(tiny_bert: str) -> None:
    from realm_core.errors import ConfigError

    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore([], [], tok)
    qs = [QAQuestion(q.qid, q.question, q.answers, passage=blocks.add_passage(TITLES[i], TEXTS[i]))
          for i, q in zip((0, 1, 2, 4), QUESTIONS, strict=True)]
    q_ids = [tok(q.question, truncation=True, max_length=24)["input_ids"] for q in qs]
    rows = reader_rows(q_ids, np.array([[q.passage] for q in qs]), blocks, 48, tok.sep_token_id, tok.pad_token_id)
    assert gold_row_lengths(qs, blocks, tok, 24, 48) == rows.attention_mask.sum(-1).flatten().tolist()
    assert gold_row_lengths(qs, blocks, tok, 24, 20) == [20] * 4  # cut as the rows are
    with pytest.raises(ConfigError, match="question 'q0' .* has no gold passage"):
        gold_row_lengths(QUESTIONS, blocks, tok, 24, 48)


def test_gold_passage_phase_learns_and_keeps_the_best_dev_checkpoint(tiny_bert: str, tmp_path: Path) -> None:
    """The reader alone on each question's own passage (K=1), selected by dev exact match;
    after the dev score stops improving for `patience` evaluations the run stops early."""
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore([], [], tok)
    qs = [QAQuestion(q.qid, q.question, q.answers, passage=blocks.add_passage(TITLES[i], TEXTS[i]))
          for i, q in zip((0, 1, 2, 4), QUESTIONS, strict=True)]
    assert blocks.add_passage(TITLES[0], TEXTS[0]) == qs[0].passage  # one id per passage
    models = QAModels(SpanReader.from_pretrained(tiny_bert, 4, seed=0), None)
    config = _config(form="joint")
    budget = ReaderBudget(steps=60, batch_size=2, learning_rate=3e-3, warmup_steps=0, eval_every=4, patience=3,
                          group_by_length=True)
    curves = train_reader(models, GoldPassage(blocks, 1), qs, blocks, tok, config, budget, tmp_path, dev=qs)
    assert all(r["row_tokens"] > 0 for r in curves.steps)  # what each step computed, padding included
    evals = [r["dev_em"] for r in curves.steps if r["dev_em"] is not None]
    assert curves.best_dev_em == max(evals) == 1.0
    assert curves.stopped_early and len(curves.steps) < 60
    after = predict(models, GoldPassage(blocks, 1), qs, blocks, tok, config)[None]
    assert all(answer_correct(p.answer, q) for p, q in zip(after, qs, strict=True))  # the best weights


def test_segment_ids_mark_the_block_and_cuts_are_counted(tiny_bert: str) -> None:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    q = tok("What is the capital?")["input_ids"]
    rows = reader_rows([q], np.array([[0]]), blocks, 64, tok.sep_token_id, tok.pad_token_id)
    n = int(rows.attention_mask[0, 0].sum())
    assert rows.token_type_ids[0, 0, :len(q)].tolist() == [0] * len(q)
    assert rows.token_type_ids[0, 0, len(q):n].tolist() == [1] * (n - len(q)) and rows.truncated == 0
    short = reader_rows([q], np.array([[0, 1]]), blocks, len(q) + 6, tok.sep_token_id, tok.pad_token_id)
    assert short.truncated == 2
    # recall on the text read: the answer "Spree" ends block 1, cut away here
    spree = QAQuestion("x", "?", ("Spree",))
    assert blocks.holds_answer(spree, 1) and not blocks.holds_answer(spree, 1, short.body_len[0][1])


def test_temperature_fit_picks_the_best_dev_exact_match() -> None:
    qs = [QAQuestion("a", "?", ("x",)), QAQuestion("b", "?", ("y",)), QAQuestion("c", "?", ("z",))]
    by_t = {None: [Prediction(a, 1.0, [], []) for a in ("x", "n", "n")],
            1.0: [Prediction(a, 1.0, [], []) for a in ("x", "y", "n")],
            4.0: [Prediction(a, 1.0, [], []) for a in ("x", "y", "n")]}
    best, scores = fit_temperature(by_t, qs)
    assert best == 1.0  # ties go to the first candidate
    assert scores == {"uniform": pytest.approx(1 / 3), "1": pytest.approx(2 / 3), "4": pytest.approx(2 / 3)}


def test_a_reader_length_that_cannot_hold_question_and_body_is_refused_before_any_step(
        store: object, tmp_path: Path) -> None:
    from realm_core.errors import ConfigError
    from realm_core.openqa.finetune_stage import QASystem, run_finetune
    from realm_core.store.artifacts import ArtifactRef

    config = _config(reader_length=32, question_length=30)
    dummy = ArtifactRef("blocks", str(tmp_path / "none"), "0" * 64)
    with pytest.raises(ConfigError, match=r"reader_length 32 cannot hold a question of .* 30"):
        run_finetune(store, dummy, dummy, QASystem("bm25", "BM25 + reader", "bm25", "unused"), None,  # type: ignore[arg-type]
                     config)


def test_answers_longer_than_the_span_limit_are_counted_not_a_crash(tiny_bert: str, tmp_path: Path) -> None:
    models, retriever, blocks, tok = _setup(tiny_bert, "bm25")
    long = [QAQuestion("q9", "Which museum is in the capital of Spain?", ("capital of Spain and hosts the Prado",))]
    config = _config(steps=2)  # spans of up to 4 wordpieces, as _setup's reader
    curves = train_reader(models, retriever, long, blocks, tok, config, config.budget(), tmp_path)
    assert [r["questions"] for r in curves.steps] == [1, 1]  # retrieved: the text holds the answer
    assert [r["no_gold_span"] for r in curves.steps] == [1, 1]  # but 7 wordpieces > 4: nothing to learn
    assert all(r["loss"] != r["loss"] for r in curves.steps)  # NaN: no step taken
