import pytest

from realm_core.spans.dates import Span, find_dates, resolve_overlaps


@pytest.mark.parametrize("text,expected", [
    ("He was born on 12 March 1995 in Paris.", ["12 March 1995"]),
    ("On March 12, 1995, it rained.", ["March 12, 1995"]),
    ("In March 1995 the war ended.", ["March 1995"]),
    ("Music of the 1990s and 1980s.", ["the 1990s", "1980s"]),
    ("World War I (1914-1918) began in 1914.", ["1914-1918", "1914"]),
    ("from 1914\u201318 onward", ["1914\u201318"]),
    ("Rome fell in 476 AD; Troy in 1184 BC.", ["476 AD", "1184 BC"]),
    ("Abdelaziz Bouteflika (born 1937) has been President since 1999.", ["1937", "1999"]),
    ("Super Bowl 50 was played on February 7, 2016, at Levi Stadium.", ["February 7, 2016"]),
    ("It has 2000 people and 1,541 communes; room 1066 is empty.", []),
    ("The 2016 season", []),
    ("Apollo ran from 1961 to 1972.", ["1961 to 1972"]),
])
def test_date_regexes_exact(text: str, expected: list[str]) -> None:
    assert [text[s.start:s.end] for s in find_dates(text)] == expected


def test_longer_span_wins_and_records_every_source() -> None:
    ner = Span(0, 13, "EVENT", "ner")       # "World War II " (illustrative)
    date = Span(10, 20, "DATE", "date")
    short = Span(30, 33, "ORG", "ner")
    resolved = resolve_overlaps([date, ner, short])
    assert [w for w, _ in resolved] == [ner, short]
    assert {s.source for s in resolved[0][1]} == {"ner", "date"}
