"""Templates, tables and bold/italic quotes in wikitext, rendered to plain text.

Templates are rendered innermost first. A template whose text is article prose keeps it
(`CONTENT_TEMPLATES`, e.g. {{lang|la|albedo}} -> albedo, {{convert|10|km|mi}} -> 10 km); every
other template (infoboxes, citations, navboxes, maintenance tags, parser functions) and every
table `{|...|}` is dropped. Quote runs are resolved per line as MediaWiki's parser does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_BRACES = re.compile(r"\{\{|\}\}|\{\||\|\}")
_PARAM_SPLIT = re.compile(r"\[\[|\]\]|\|")
_NAMED_PARAM = re.compile(r"\s*[\w .-]+\s*")
_RANGE_WORDS = ("-", "–", "to", "and", "or", "by", "x", "×", "+/-", "±")
_QUOTE_RUNS = re.compile(r"('{2,})")
_QUOTE_LINE = re.compile(r"^.*''.*$", re.MULTILINE)


def _split_params(inner: str) -> list[str]:
    """A template's text split at its own `|` separators (not those inside [[links]])."""
    parts, depth, start = [], 0, 0
    for m in _PARAM_SPLIT.finditer(inner):
        tok = m.group()
        if tok == "[[":
            depth += 1
        elif tok == "]]":
            depth = max(depth - 1, 0)
        elif depth == 0:
            parts.append(inner[start:m.start()])
            start = m.end()
    parts.append(inner[start:])
    return parts


def _positional(params: list[str]) -> list[str]:
    """Positional parameters in order (`2=x` is the second); named ones are skipped."""
    found: dict[int, str] = {}
    n = 0
    for p in params:
        key, eq, value = p.partition("=")
        if eq and key.strip().isdigit():
            found[int(key.strip())] = value.strip()
        elif not (eq and _NAMED_PARAM.fullmatch(key)):
            n += 1
            found.setdefault(n, p.strip())
    return [found.get(i, "") for i in range(1, max(found, default=0) + 1)]


def _at(p: list[str], i: int) -> str:
    return p[i] if -len(p) <= i < len(p) else ""


def _first(p: list[str]) -> str:
    return _at(p, 0)


def _nihongo(p: list[str]) -> str:
    """{{nihongo|English|kanji|romaji}} -> English (kanji, romaji)."""
    rest = [x for x in p[1:3] if x]
    if not rest:
        return _first(p)
    return f"{_first(p)} ({', '.join(rest)})" if _first(p) else ", ".join(rest)


def _convert(p: list[str]) -> str:
    """{{convert|10|km|mi}} -> 10 km; {{convert|5|to|7|m}} -> 5 to 7 m; {{cvt|3-4|kg}} -> 3-4 kg."""
    out, i = _first(p), 1
    while i + 1 < len(p) and p[i] in _RANGE_WORDS:
        out += (p[i] if p[i] in ("-", "–") else f" {p[i]} ") + p[i + 1]
        i += 2
    return f"{out} {_at(p, i)}".strip()


def _frac(p: list[str]) -> str:
    """{{frac|1|2}} -> 1/2; {{frac|3|1|2}} -> 3 1/2; {{frac|4}} -> 1/4."""
    if len(p) >= 3:
        return f"{p[0]} {p[1]}/{p[2]}"
    return "/".join(p[:2]) if len(p) == 2 else f"1/{_first(p)}"


def _literal(text: str) -> Callable[[list[str]], str]:
    return lambda _: text


# Templates whose text is article prose: lower-case name (`_` read as a space) -> its plain text
# from the positional parameters. `lang-xx` ({{lang-fr|texte}}) is matched by its prefix.
CONTENT_TEMPLATES: dict[str, Callable[[list[str]], str]] = {
    "lang": lambda p: _at(p, 1),
    "transl": lambda p: _at(p, -1),
    "transliteration": lambda p: _at(p, -1),
    "nihongo": _nihongo,
    "convert": _convert,
    "cvt": _convert,
    "frac": _frac,
    "circa": lambda p: f"c. {_first(p)}".strip(),
    "c.": lambda p: f"c. {_first(p)}".strip(),
    "as of": lambda p: f"As of {_first(p)}".strip(),
    **dict.fromkeys((
        "nihongo2", "ill", "interlanguage link", "abbr", "val", "nowrap", "nobr", "small", "smaller",
        "big", "larger", "em", "strong", "sic", "mvar", "var", "math", "noitalic", "nobold", "text",
        "resize", "gloss", "keypress"), _first),
    "'": _literal("'"),
    "'s": _literal("'s"),
    "ndash": _literal("–"),
    "mdash": _literal("—"),
    "snd": _literal(" – "),
    "spaced ndash": _literal(" – "),
    "nbsp": _literal(" "),
    "dot": _literal(" · "),
}


def render_template(inner: str) -> str:
    """The plain text of one `{{inner}}`, its own templates already rendered."""
    params = _split_params(inner)
    name = params[0].strip().lower().replace("_", " ")
    rule = CONTENT_TEMPLATES.get(name)
    if rule is None and name.startswith("lang-"):
        rule = _first
    return rule(_positional(params[1:])) if rule is not None else ""


def render_braces(text: str) -> str:
    """Templates rendered by `render_template` and tables removed, however deeply nested.

    An unclosed `{{` is taken to end at the end of its line: its name and parameters go, the
    rest of the page stays (it once swallowed the page). An unclosed table runs to the page's
    end, as MediaWiki renders it."""
    stack: list[tuple[str, list[str]]] = []  # an open construct and the buffer it interrupted
    buf: list[str] = []
    start = pos = 0
    while m := _BRACES.search(text, pos):
        tok, at = m.group(), m.start()
        if tok == "|}" and stack and stack[-1][0] == "{{" and text.startswith("}}", at + 1):
            tok, at = "}}", at + 1  # `{{name|}}`: an empty last parameter, not a table end
        buf.append(text[start:at])
        pos = start = at + 2
        if tok in ("{{", "{|"):
            stack.append((tok, buf))
            buf = []
        elif stack and stack[-1][0] == ("{{" if tok == "}}" else "{|"):
            opener, parent = stack.pop()
            parent.append(render_template("".join(buf)) if opener == "{{" else "")
            buf = parent
        else:
            buf.append(tok)  # a stray closer is text
    buf.append(text[start:])
    while stack:
        opener, parent = stack.pop()
        inner = "".join(buf)
        line_end = inner.find("\n")
        parent.append(inner[line_end:] if opener == "{{" and line_end >= 0 else "")
        buf = parent
    return "".join(buf)


def _line_quotes(m: re.Match[str]) -> str:
    """MediaWiki's doQuotes on one line, for plain text: every bold/italic run goes and the
    apostrophes MediaWiki shows as text stay. A run of 4 is an apostrophe + bold, one of more
    than 5 keeps its extra apostrophes; with an odd number of both bold and italic runs, one bold
    run is an apostrophe + italics (the first after a one-letter word, else after a longer word,
    else after a space): ''Iliad'''s -> Iliad's, qu'''Undertale'' -> qu'Undertale."""
    parts = _QUOTE_RUNS.split(m.group())
    for i in range(1, len(parts), 2):
        n = len(parts[i])
        if n == 4:
            parts[i - 1] += "'"
            parts[i] = "'" * 3
        elif n > 5:
            parts[i - 1] += "'" * (n - 5)
            parts[i] = "'" * 5
    runs = [len(parts[i]) for i in range(1, len(parts), 2)]
    if sum(n in (2, 5) for n in runs) % 2 and sum(n in (3, 5) for n in runs) % 2:
        single = multi = space = None
        for i in range(1, len(parts), 2):
            if len(parts[i]) != 3:
                continue
            before = parts[i - 1]
            if before[-1:] == " ":
                space = space or i
            elif before[-2:-1] == " ":
                single = i
                break
            else:
                multi = multi or i
        pick = single or multi or space
        if pick is not None:
            parts[pick - 1] += "'"
    return "".join(parts[::2])


def resolve_quotes(text: str) -> str:
    """Bold/italic markup out, literal apostrophes kept, line by line."""
    return _QUOTE_LINE.sub(_line_quotes, text)
