"""Wikitext to clean text.

Two passes. First a linear scan drops what never carries article prose and is most of the parse
cost: the appendix sections (See also, References, External links, ...), comments, <ref>
footnotes, tables, and templates except those whose text is prose (`wikitemplates`); bold and
italic quotes are resolved as MediaWiki does. Then mwparserfromhell's C
tokenizer reads the remainder: links become their anchor text, File/Image/Category links vanish,
formatting tags keep their contents, headings become paragraph breaks.
"""

from __future__ import annotations

import html
import re
from typing import Any

from mwparserfromhell.parser import tokens as T
from mwparserfromhell.parser._tokenizer import CTokenizer

from realm_core.ingest.wikitemplates import render_braces, resolve_quotes

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REF = re.compile(r"<ref\b[^>/]*/>|<ref\b[^>]*>.*?</ref\s*>", re.DOTALL | re.IGNORECASE)
_DROP_TAG_BLOCKS = re.compile(
    r"<(gallery|math|chem|score|timeline|imagemap|syntaxhighlight|source|graph|mapframe|templatedata)"
    r"\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
# MOS:LAYOUT puts the appendices last, in this order; none of them is prose.
_APPENDIX = re.compile(
    r"^==+\s*(?:see also|notes|references|further reading|external links|bibliography|sources|"
    r"footnotes|citations|notes and references|references and notes|works cited)\s*==+\s*$",
    re.IGNORECASE | re.MULTILINE)
_MAGIC = re.compile(r"__[A-Z]+__")
_FILE_LINK = re.compile(r"\[\[\s*(?:file|image|media)\s*:", re.IGNORECASE)
_BRACKETS = re.compile(r"\[\[|\]\]")
_DROP_LINK_NS = ("file:", "image:", "category:", "media:", "wikt:", "wiktionary:", "s:", "commons:")
_INTERLANG = re.compile(r"^[a-z]{2,3}(-[a-z]+)?:")
_KEEP_TAGS = {"b", "i", "u", "s", "em", "strong", "small", "big", "span", "sub", "sup", "abbr",
              "font", "center", "code", "tt", "var", "cite", "blockquote", "poem", "p", "div",
              "li", "dd", "dt", "nowiki", "del", "ins", "q", "onlyinclude", "includeonly"}
_LIST_TAGS = {"li", "dd", "dt"}
_ODD_SPACES = re.compile(r"[\t\u00a0]")
_STRAY_LINK_BRACKETS = re.compile(r"\[\[|\]\]")
_SPACE_RUNS = re.compile(r" {2,}")
_EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r" (?=[,.;:!?])")
_MARKUP_LINE = re.compile(r"^[ \t]*(?:[|!].*|[*#:;]+)[ \t]*$", re.MULTILINE)
_LINE_START = re.compile(r"^[ *#:;]+", re.MULTILINE)
_LINE_END = re.compile(r" +(?=\n)| +\Z")
_NEWLINES = re.compile(r"\n{3,}")
_OPENERS = {T.WikilinkOpen: "link", T.ExternalLinkOpen: "extlink_url", T.TemplateOpen: "template",
            T.ArgumentOpen: "argument", T.CommentStart: "comment", T.HeadingStart: "heading",
            T.HTMLEntityStart: "entity", T.TagOpenOpen: "tag"}
_CLOSERS = {T.WikilinkClose: "link", T.ExternalLinkClose: "extlink", T.TemplateClose: "template",
            T.ArgumentClose: "argument", T.CommentEnd: "comment", T.HeadingEnd: "heading"}
_DROPPED_KINDS = {"template", "argument", "comment", "heading", "extlink_url"}


def drop_file_links(text: str) -> str:
    """Remove `[[File:...]]` and `[[Image:...]]` with their captions, nested links included.

    Captions may span lines, which defeats the tokenizer's link rule; a bracket count does not.
    """
    out: list[str] = []
    pos = 0
    while m := _FILE_LINK.search(text, pos):
        out.append(text[pos:m.start()])
        depth, scan = 1, m.end()
        while depth and (b := _BRACKETS.search(text, scan)):
            depth += 1 if b.group() == "[[" else -1
            scan = b.end()
        pos = scan if depth == 0 else len(text)
    out.append(text[pos:])
    return "".join(out)


class _Frame:
    """An open construct in the token stream: text goes to `sink`; `parts` keeps what counts."""

    __slots__ = ("entity", "kind", "name", "parts", "sink")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[list[str]] = [[]]  # link: [target, anchor]; tag: [name, body]
        self.sink = self.parts[0]
        self.name = ""
        self.entity = ""


_DROP: list[str] = []  # a sink whose contents nobody reads; cleared as it goes


def _close_link(f: _Frame) -> str:
    target = "".join(f.parts[0]).strip()
    low = target.lower().lstrip(":")
    if low.startswith(_DROP_LINK_NS) or (_INTERLANG.match(low) and not target.startswith(":")):
        return ""
    if len(f.parts) > 1:
        return "".join(f.parts[1])
    return target.split("#")[0] if not target.startswith("#") else target[1:]


def _close_tag(f: _Frame, selfclose: bool) -> str:
    name = f.name
    if name == "br":
        return "\n"
    if name in _LIST_TAGS:
        return "\n" + ("" if selfclose else "".join(f.parts[1]))
    if selfclose or name not in _KEEP_TAGS:
        return ""  # ref, table, hr, references, ... are dropped with their contents
    return "".join(f.parts[1])


def render_tokens(tokens: list[Any]) -> str:
    """Plain text from mwparserfromhell's token stream (its C tokenizer), in one linear pass.

    Building mwparserfromhell's node tree costs several times the tokenizing itself; the rules
    here are the ones a tree walk would apply, read straight off the balanced token stream.
    """
    root: list[str] = []
    stack: list[_Frame] = []
    sink = root
    for tok in tokens:
        t = type(tok)
        if t is T.Text:
            sink.append(tok["text"])
            continue
        if t in _OPENERS:
            f = _Frame(_OPENERS[t])
            if f.kind in _DROPPED_KINDS:
                f.sink = _DROP
            stack.append(f)
            sink = f.sink
            continue
        if not stack:
            continue  # a stray closer (the tokenizer balances, but be safe)
        f = stack[-1]
        if t is T.WikilinkSeparator and f.kind == "link" and len(f.parts) == 1:
            f.parts.append([])
            sink = f.sink = f.parts[1]
            continue
        if t is T.ExternalLinkSeparator and f.kind == "extlink_url":
            f.kind, f.sink = "extlink", f.parts[0]
            sink = f.sink
            continue
        if f.kind == "tag":
            if t is T.TagAttrStart or t is T.TagCloseOpen:
                f.name = f.name or "".join(f.parts[0]).strip().lower()
                if t is T.TagCloseOpen:
                    f.parts.append([])
                    sink = f.sink = f.parts[1]
                else:
                    sink = f.sink = _DROP
                continue
            if t is T.TagOpenClose:
                sink = f.sink = _DROP
                continue
            if t is not T.TagCloseSelfclose and t is not T.TagCloseClose:
                continue  # TagAttrEquals, TagAttrQuote
            f.name = f.name or "".join(f.parts[0]).strip().lower()
            text = _close_tag(f, t is T.TagCloseSelfclose)
        elif f.kind == "entity":
            if t is T.HTMLEntityNumeric:
                f.entity += "#"
                continue
            if t is T.HTMLEntityHex:
                f.entity += tok.get("char", "x")
                continue
            if t is not T.HTMLEntityEnd:
                continue
            text = html.unescape(f"&{f.entity}{''.join(f.parts[0])};")
        elif _CLOSERS.get(t) == f.kind or (t is T.ExternalLinkClose and f.kind == "extlink_url"):
            if f.kind == "link":
                text = _close_link(f)
            elif f.kind == "extlink":
                text = "".join(f.parts[0])
            elif f.kind == "heading":
                text = "\n\n"  # the rule: a section heading becomes a paragraph break
            else:
                text = ""  # templates, arguments, comments, bare URLs
        else:
            continue  # separators inside templates, arguments and the like
        stack.pop()
        _DROP.clear()
        sink = stack[-1].sink if stack else root
        sink.append(text)
    return "".join(root)


def clean_wikitext(wikitext: str) -> str:
    """Clean article text: paragraphs separated by a blank line, no markup left."""
    text = _COMMENT.sub("", wikitext)
    if appendix := _APPENDIX.search(text):
        text = text[: appendix.start()]
    text = _REF.sub("", text)
    text = _DROP_TAG_BLOCKS.sub("", text)
    text = render_braces(text)
    text = drop_file_links(text)
    text = resolve_quotes(_MAGIC.sub("", text))
    plain = render_tokens(CTokenizer().tokenize(text, 0, False))
    return normalise_whitespace(plain)


def normalise_whitespace(text: str) -> str:
    """Whole-text passes (one regex call each, not one per line): collapse spaces, drop empty
    parentheses left by removed templates and lines of leftover table/list markup."""
    text = _STRAY_LINK_BRACKETS.sub("", text)  # an unclosed [[ (the tokenizer left it as text)
    text = _SPACE_RUNS.sub(" ", _ODD_SPACES.sub(" ", text))
    text = _EMPTY_PARENS.sub("", text)
    text = _SPACE_BEFORE_PUNCT.sub("", text)
    text = _MARKUP_LINE.sub("", text)
    text = _LINE_END.sub("", _LINE_START.sub("", text))
    # Lines within a paragraph join with "\n"; blank lines separate paragraphs.
    return _NEWLINES.sub("\n\n", text).strip()
