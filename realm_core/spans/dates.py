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
# Patterns start at a digit or a month name (fast scans); context before a match is checked on
# the few characters preceding it instead of being tried at every position of the text.
_THE_BEFORE = re.compile(r"\b[Tt]he (?:early |mid-|mid |late )?$")
_YEAR_CONTEXT = (r"(?:[Ii]n|[Ss]ince|[Ff]rom|[Uu]ntil|[Tt]ill|[Bb]y|[Dd]uring|[Bb]efore|[Aa]fter|"
                 r"[Cc]irca|c\.|[Aa]round|[Yy]ear|[Ee]arly|[Ll]ate|[Mm]id|[Oo]f|[Tt]hrough|"
                 r"[Bb]etween|and|or|to|[Bb]orn|[Dd]ied|[Ee]nded|[Bb]egan|[Ff]ounded|[Ee]stablished|"
                 r"[Hh]is|[Hh]er|[Ii]ts|[Tt]heir)")
_YEAR_BEFORE = re.compile(rf"(?:\b{_YEAR_CONTEXT} |\()$")
_YEAR_AFTER_PAREN = re.compile(r"\)|,|;| [-\u2013]")

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
    # 1990s | 1800s (the 1990s: see _THE_BEFORE)
    ("decade", re.compile(r"\b(?:1[0-9]{2}|20[0-9])0s\b")),
    # 1914-1918 | 1914\u201318 | 1914 to 1918
    ("year_range", re.compile(rf"\b{_YEAR}(?:{_DASH})(?:{_YEAR}|[0-9]{{2}})\b{_ERA}?")),
    # 1995 AD | 450 BC | 11,000 BC | between 6000 and 2000 BC
    ("year_era", re.compile(rf"\b{_ERA_YEAR}{_ERA}")),
    ("era_range", re.compile(rf"\b[Bb]etween {_ERA_YEAR}{_ERA}? and {_ERA_YEAR}{_ERA}")),
    # 18th century | 18th-century (the 18th century: see _THE_BEFORE)
    ("century", re.compile(r"\b(?:[1-9]|1[0-9]|2[01])(?:st|nd|rd|th)[ -]century\b"
                           r"(?: BC| AD| BCE| CE)?")),
    # the year 2000
    ("the_year", re.compile(rf"\b[Tt]he year {_YEAR}\b")),
    # in 1995 | since 1066 | (1961): a bare year needs the context _YEAR_BEFORE checks
    ("year", re.compile(rf"\b{_YEAR}\b(?![,.]?[0-9])")),
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
    for name, rx in DATE_PATTERNS:
        for m in rx.finditer(text):
            start, end = m.span()
            before = text[max(0, start - 16):start]
            if name == "year":
                ctx = _YEAR_BEFORE.search(before)
                if ctx is None or (ctx.group() == "(" and not _YEAR_AFTER_PAREN.match(text, end)):
                    continue
            elif name in ("decade", "century") and (the := _THE_BEFORE.search(before)):
                start -= len(the.group())
            found.append(Span(start, end, "DATE", "date"))
    return [winner for winner, _ in resolve_overlaps(found)]
