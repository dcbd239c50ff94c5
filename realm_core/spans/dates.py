"""Date spans by regex (REALM §3.4 masks named entities and dates). Every pattern is anchored on
word boundaries; a bare year counts only in a context that makes it a year."""

from __future__ import annotations

import re
from dataclasses import dataclass

_MONTH = (r"(?:January|February|March|April|May|June|July|August|September|October|November|"
          r"December|Jan\.|Feb\.|Mar\.|Apr\.|Jun\.|Jul\.|Aug\.|Sep\.|Sept\.|Oct\.|Nov\.|Dec\.)")
_DAY = r"(?:[12][0-9]|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:1[0-9]{3}|20[0-9]{2})"  # 1000-2099
_DASH = r"\s?[-\u2013\u2014]\s?|\s(?:to|until|through)\s"
_ERA = r"(?:\s?(?:AD|BC|BCE|CE|A\.D\.|B\.C\.E\.|B\.C\.|C\.E\.)(?![A-Za-z]))"
_ERA_YEAR = r"(?:[0-9]{1,2},[0-9]{3}|[0-9]{1,5})"  # 450 BC, 11,000 BC
_YEAR_CONTEXT = (r"(?:[Ii]n|[Ss]ince|[Ff]rom|[Uu]ntil|[Tt]ill|[Bb]y|[Dd]uring|[Bb]efore|[Aa]fter|"
                 r"[Cc]irca|c\.|[Aa]round|[Yy]ear|[Ee]arly|[Ll]ate|[Mm]id|[Oo]f|[Tt]hrough|"
                 r"[Bb]etween|and|or|to|[Bb]orn|[Dd]ied|[Ee]nded|[Bb]egan|[Ff]ounded|[Ee]stablished|"
                 r"[Hh]is|[Hh]er|[Ii]ts|[Tt]heir)")

DATE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # 12 March 1995 | 12-14 March 1995
    ("day_month_year", re.compile(rf"\b{_DAY}(?:{_DASH}{_DAY})? {_MONTH},? {_YEAR}\b{_ERA}?")),
    # March 12, 1995 | March 12 1995
    ("month_day_year", re.compile(rf"\b{_MONTH} {_DAY},? {_YEAR}\b{_ERA}?")),
    # 12 March | March 12 (no year)
    ("day_month", re.compile(rf"\b{_DAY} {_MONTH}(?![a-z])")),
    ("month_day", re.compile(rf"\b{_MONTH} {_DAY}\b(?!,? {_YEAR})")),
    # March 1995
    ("month_year", re.compile(rf"\b{_MONTH},? {_YEAR}\b{_ERA}?")),
    # the 1990s | 1990s | the 1800s
    ("decade", re.compile(r"(?:\b[Tt]he (?:early |mid-|mid |late )?)?\b(?:1[0-9]{2}|20[0-9])0s\b")),
    # 1914-1918 | 1914–18 | 1914 to 1918
    ("year_range", re.compile(rf"\b{_YEAR}(?:{_DASH})(?:{_YEAR}|[0-9]{{2}})\b{_ERA}?")),
    # 1995 AD | 450 BC | 11,000 BC | between 6000 and 2000 BC
    ("year_era", re.compile(rf"\b{_ERA_YEAR}{_ERA}")),
    ("era_range", re.compile(rf"\b[Bb]etween {_ERA_YEAR}{_ERA}? and {_ERA_YEAR}{_ERA}")),
    # the 18th century | the early 20th century
    ("century", re.compile(r"(?:\b[Tt]he (?:early |mid-|mid |late )?)?\b(?:[1-9]|1[0-9]|2[01])"
                           r"(?:st|nd|rd|th)[ -]century\b(?: BC| AD| BCE| CE)?")),
    # the year 2000
    ("the_year", re.compile(rf"\b[Tt]he year {_YEAR}\b")),
    # in 1995 | since 1066 | (1961): a bare year needs context; the span is the group `d`
    ("year", re.compile(rf"\b{_YEAR_CONTEXT} (?P<d>{_YEAR})\b(?![,.]?[0-9])|"
                        rf"\((?P<p>{_YEAR})(?=\)|,|;| [-\u2013])")),
)


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    label: str
    source: str

    @property
    def length(self) -> int:
        return self.end - self.start


def resolve_overlaps(spans: list[Span]) -> list[tuple[Span, list[Span]]]:
    """Longest span wins each overlap (then the earlier one). Returns (winner, everything it
    overlapped, itself included), in text order."""
    chosen: list[tuple[Span, list[Span]]] = []
    for span in sorted(spans, key=lambda s: (-s.length, s.start, s.source)):
        if any(span.start < w.end and w.start < span.end for w, _ in chosen):
            continue
        chosen.append((span, [s for s in spans if s.start < span.end and span.start < s.end]))
    return sorted(chosen, key=lambda c: c[0].start)


def find_dates(text: str) -> list[Span]:
    """Date spans in `text`, overlaps among the patterns resolved (longest wins)."""
    found = []
    for _, rx in DATE_PATTERNS:
        for m in rx.finditer(text):
            group = next((g for g in ("d", "p") if g in rx.groupindex and m.group(g)), None)
            start, end = m.span(group) if group else m.span()
            found.append(Span(start, end, "DATE", "date"))
    return [winner for winner, _ in resolve_overlaps(found)]
