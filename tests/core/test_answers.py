from realm_core.answers import (
    answer_tokens,
    exact_match,
    has_answer,
    normalize_answer,
    token_string,
)


def test_tokens_split_words_and_punctuation_and_strip_accents_by_nfd() -> None:
    assert answer_tokens("Denver Broncos' 24-10 win") == ["denver", "broncos", "'", "24", "-", "10", "win"]
    assert answer_tokens("Café au lait") == ["cafe\u0301", "au", "lait"]
    assert token_string("Café") == token_string("Cafe\u0301")  # composed and decomposed agree


def test_has_answer_respects_token_boundaries() -> None:
    block = token_string("The Denver Broncos defeated the Carolina Panthers 24-10.")
    assert has_answer(["Denver Broncos"], block)
    assert has_answer(["24-10"], block)
    assert not has_answer(["Denver Bronco"], block)  # a prefix of a token is not a match
    assert not has_answer(["Panthers 24-11", ""], block)


def test_squad_normalisation_and_exact_match() -> None:
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert exact_match("denver broncos", ["The Denver Broncos"])
    assert not exact_match("Broncos", ["The Denver Broncos"])
