"""Open-QA fine-tuning on a tiny random BERT (the bundled vocabulary): reader rows, learning,
exact resume, prediction back to the block's own text, answer matching."""

from pathlib import Path

import numpy as np
import pytest
import torch

from realm_core.config import FinetuneConfig
from realm_core.encoders import load_tokenizer
from realm_core.errors import InputError
from realm_core.openqa.finetune import (
    BlockStore,
    QAModels,
    QAQuestion,
    QARetriever,
    finetune,
    predict,
    reader_rows,
)
from realm_core.openqa.qa_stage import _check_regexes, answer_correct, answerable
from realm_core.openqa.span_reader import SpanReader
from realm_core.retrieval.encoders import RetrieverEncoder

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
            "learning_rate": 3e-3, "warmup_steps": 0, "steps": 40, "dropout": 0.0, "checkpoint_every": 10}
    return FinetuneConfig(**(base | kw))


def _setup(tiny_bert: str, kind: str) -> tuple[QAModels, QARetriever, BlockStore, object]:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    reader = SpanReader.from_pretrained(tiny_bert, 4, seed=0)
    if kind == "bm25":
        return QAModels(reader, None), QARetriever("bm25", blocks, 2, 24), blocks, tok
    query = RetrieverEncoder.from_pretrained(tiny_bert, projection_dim=8, seed=0)
    docs = RetrieverEncoder.from_pretrained(tiny_bert, projection_dim=8, seed=0).eval()
    enc = tok([f"{t} {b}" for t, b in zip(TITLES, TEXTS, strict=True)], padding=True, return_tensors="pt")
    with torch.no_grad():
        vectors = docs(enc["input_ids"], enc["attention_mask"]).numpy()
    return QAModels(reader, query), QARetriever("dense", blocks, 2, 24, query, tok, vectors), blocks, tok


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


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_finetuning_learns_to_answer_and_trains_only_the_query_side(tiny_bert: str, kind: str,
                                                                   tmp_path: Path) -> None:
    models, retriever, blocks, tok = _setup(tiny_bert, kind)
    config = _config()
    before = predict(models, retriever, QUESTIONS, blocks, tok, config, 10, 4)
    vectors = None if retriever.vectors is None else retriever.vectors.clone()
    query_before = None if models.query_encoder is None else models.query_encoder.projection.weight.clone()
    curves = finetune(models, retriever, QUESTIONS, blocks, tok, config, tmp_path)
    after = predict(models, retriever, QUESTIONS, blocks, tok, config, 10, 4)
    losses = [r["loss"] for r in curves.steps if r["loss"] == r["loss"]]
    assert losses[-1] < losses[0] / 4
    answerable_now = [q for q, p in zip(QUESTIONS, after, strict=True)
                      if any(blocks.holds_answer(q, z) for z in p.block_ids)]
    assert answerable_now, "the retriever should find some answers on this corpus"
    correct_after = sum(answer_correct(p.answer, q) for q, p in zip(QUESTIONS, after, strict=True))
    correct_before = sum(answer_correct(p.answer, q) for q, p in zip(QUESTIONS, before, strict=True))
    assert correct_after == len(answerable_now) > correct_before
    if kind == "dense":
        assert torch.equal(retriever.vectors, vectors)  # the document side is frozen
        assert not torch.equal(models.query_encoder.projection.weight, query_before)


def test_killed_finetuning_resumes_to_the_same_parameters(tiny_bert: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(steps=6, checkpoint_every=2)
    models, retriever, blocks, tok = _setup(tiny_bert, "dense")
    finetune(models, retriever, QUESTIONS, blocks, tok, config, tmp_path / "straight")
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
        finetune(models, retriever, QUESTIONS, blocks, tok, config, tmp_path / "killed")
    monkeypatch.setattr(ft, "save_checkpoint", real_save)
    models, retriever, blocks, tok = _setup(tiny_bert, "dense")  # a fresh process's models
    curves = finetune(models, retriever, QUESTIONS, blocks, tok, config, tmp_path / "killed")
    assert [r["step"] for r in curves.steps] == [1, 2, 3, 4, 5, 6]
    for k, v in models.reader.state_dict().items():
        assert torch.allclose(v, straight[k], atol=1e-6), k
    for k, v in models.query_encoder.state_dict().items():
        assert torch.allclose(v, straight_q[k], atol=1e-6), k


def test_no_retrieval_has_nothing_to_extract(tiny_bert: str) -> None:
    tok = load_tokenizer(tiny_bert)
    blocks = BlockStore(TITLES, TEXTS, tok)
    models = QAModels(SpanReader.from_pretrained(tiny_bert, 4), None)
    preds = predict(models, QARetriever("none", blocks, 5, 24), QUESTIONS, blocks, tok, _config(), 10, 4)
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
