"""Wikitext to clean text.

Two passes. First a linear scan drops what never carries article prose and is most of the parse
cost: comments, <ref> footnotes, templates `{{...}}` and tables `{|...|}` (nesting-aware). Then
mwparserfromhell parses the remainder: links become their anchor text, File/Image/Category links
vanish, formatting tags keep their contents, headings become paragraph breaks.
"""

from __future__ import annotations

import html
import re

import mwparserfromhell
from mwparserfromhell.nodes import (Argument, Comment, ExternalLink, Heading, HTMLEntity, Tag,
                                    Template, Text, Wikilink)

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_REF = re.compile(r"<ref\b[^>/]*/>|<ref\b[^>]*>.*?</ref\s*>", re.S | re.I)
_DROP_TAG_BLOCKS = re.compile(
    r"<(gallery|math|chem|score|timeline|imagemap|syntaxhighlight|source|graph|mapframe|templatedata)"
    r"\b[^>]*>.*?</\1\s*>", re.S | re.I)
_BRACES = re.compile(r"\{\{|\}\}|\{\||\|\}")
_MAGIC = re.compile(r"__[A-Z]+__")
_DROP_LINK_NS = ("file:", "image:", "category:", "media:", "wikt:", "wiktionary:", "s:", "commons:")
_INTERLANG = re.compile(r"^[a-z]{2,3}(-[a-z]+)?:")
_KEEP_TAGS = {"b", "i", "u", "s", "em", "strong", "small", "big", "span", "sub", "sup", "abbr",
              "font", "center", "code", "tt", "var", "cite", "blockquote", "poem", "p", "div",
              "li", "dd", "dt", "nowiki", "del", "ins", "q", "onlyinclude", "includeonly"}
_LIST_TAGS = {"li", "dd", "dt"}
_SPACES = re.compile(r"[ \t\u00a0]+")
_EMPTY_PARENS = re.compile(r"\(\s*[,;]?\s*\)")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?])")
_NEWLINES = re.compile(r"\n{3,}")


def drop_nested_braces(text: str) -> str:
    """Remove every `{{...}}` template and `{|...|}` table, however deeply nested."""
    out: list[str] = []
    stack: list[str] = []
    start = pos = 0
    while m := _BRACES.search(text, pos):
        tok, at = m.group(), m.start()
        if tok == "|}" and stack and stack[-1] == "{{" and text.startswith("}}", at + 1):
            tok, at = "}}", at + 1  # `{{name|}}`: an empty last parameter, not a table end
        pos = at + 2
        if tok in ("{{", "{|"):
            if not stack:
                out.append(text[start:at])
            stack.append(tok)
        elif stack and stack[-1] == ("{{" if tok == "}}" else "{|"):
            stack.pop()
            if not stack:
                start = pos
    if not stack:
        out.append(text[start:])
    # An unclosed template swallows the rest of the page, as MediaWiki would render it broken.
    return "".join(out)


def _render(nodes: list[object], out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, Text):
            out.append(str(node.value))
        elif isinstance(node, Wikilink):
            target = str(node.title).strip()
            low = target.lower().lstrip(":")
            if low.startswith(_DROP_LINK_NS) or (_INTERLANG.match(low) and not target.startswith(":")):
                continue
            if node.text is not None:
                _render(node.text.nodes, out)
            else:
                out.append(target.split("#")[0] if not target.startswith("#") else target[1:])
        elif isinstance(node, ExternalLink):
            if node.title is not None:
                _render(node.title.nodes, out)
        elif isinstance(node, Heading):
            # The rule: a section heading becomes a paragraph break.
            out.append("\n\n")
        elif isinstance(node, HTMLEntity):
            out.append(html.unescape(str(node)))
        elif isinstance(node, Tag):
            tag = str(node.tag).lower()
            if tag == "br":
                out.append("\n")
            elif tag in _KEEP_TAGS or (node.wiki_markup and tag in ("b", "i", "li", "dd", "dt")):
                if tag in _LIST_TAGS:
                    out.append("\n")
                if node.contents is not None:
                    _render(node.contents.nodes, out)
            # every other tag (ref, table, hr, references, ...) is dropped with its contents
        elif isinstance(node, (Template, Comment, Argument)):
            continue


def clean_wikitext(wikitext: str) -> str:
    """Clean article text: paragraphs separated by a blank line, no markup left."""
    text = _COMMENT.sub("", wikitext)
    text = _REF.sub("", text)
    text = _DROP_TAG_BLOCKS.sub("", text)
    text = drop_nested_braces(text)
    text = _MAGIC.sub("", text)
    out: list[str] = []
    _render(mwparserfromhell.parse(text, skip_style_tags=False).nodes, out)
    return normalise_whitespace("".join(out))


def normalise_whitespace(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        line = _SPACES.sub(" ", line).strip()
        line = _EMPTY_PARENS.sub("", line)
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", line).strip()
        # Leftover table/list markup lines carry no prose.
        if line in ("", "*", "#", ":", ";") or line.startswith(("|", "!")):
            lines.append("")
        else:
            lines.append(line.lstrip("*#:; ").strip())
    text = "\n".join(lines)
    # Lines within a paragraph join with "\n"; blank lines separate paragraphs.
    return _NEWLINES.sub("\n\n", text).strip()
