"""Answer matching for open-domain QA.

- `has_answer` (DPR's rule, used for retrieval recall): a block counts if the token sequence of a
  gold answer occurs in it, both tokenised the same way: Unicode NFD, lowercase, runs of word
  characters (combining accents included) or single other non-space characters (DPR's
  SimpleTokenizer; `\\w` plus U+0300-036F stands in for its `\\p{L}\\p{N}\\p{M}` classes).
- `normalize_answer` (SQuAD's exact-match normalisation: lowercase, drop punctuation, the articles
  a/an/the and extra whitespace), used by exact match.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Iterable

_TOKEN = re.compile(r"[\w\u0300-\u036f]+|[^\w\s\u0300-\u036f]", re.UNICODE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def answer_tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFD", text).lower())


def token_string(text: str) -> str:
    """Tokens joined by single spaces, padded with spaces: answer matching is then a substring
    test that respects token boundaries."""
    return " " + " ".join(answer_tokens(text)) + " "


@functools.lru_cache(maxsize=1 << 16)
def _needle(answer: str) -> str:
    return token_string(answer)


def has_answer(answers: Iterable[str], block_tokens: str) -> bool:
    """Does any answer occur as a token sequence in a block? (`block_tokens` from `token_string`;
    each answer's own token string is memoised: one question is tested against many blocks)."""
    for answer in answers:
        needle = _needle(answer)
        if needle.strip() and needle in block_tokens:
            return True
    return False


def regex_match(patterns: Iterable[str], text: str) -> bool:
    """CuratedTREC (DrQA, REALM): does any answer regex match, case-insensitively, anywhere?"""
    return any(re.search(p, text, flags=re.IGNORECASE) is not None for p in patterns)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    p = normalize_answer(prediction)
    return any(p == normalize_answer(a) for a in answers)


def f1_score(prediction: str, answers: Iterable[str]) -> float:
    """SQuAD v1.1's F1: token overlap of the normalised prediction with each answer, the best."""
    from collections import Counter

    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        if not pred or not gold:
            best = max(best, float(pred == gold))
            continue
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best
