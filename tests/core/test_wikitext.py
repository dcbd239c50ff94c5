from realm_core.ingest.wikitemplates import render_braces, resolve_quotes
from realm_core.ingest.wikitext import clean_wikitext


def test_nested_templates_and_tables_are_removed() -> None:
    assert render_braces("a{{x|{{y}}|z}}b{|\n|c{{d}}\n|}e") == "abe"
    # `{{name|}}` ends with an empty parameter, not a table close
    assert render_braces("a{{cite|}}b") == "ab"
    # an unclosed template ends at its line's end; the page after it stays
    assert render_braces("unclosed {{tpl|x") == "unclosed "
    assert render_braces("a {{Infobox\n| name = x\nb") == "a \n| name = x\nb"
    assert render_braces("a {| class=x\n| c\nb") == "a "  # an unclosed table runs to the end


def test_links_formatting_refs_headings() -> None:
    text = (
        "{{Infobox person|name=X}}'''Ada Lovelace''' was an [[England|English]] "
        "[[mathematician]].<ref name=a>Cite {{cite web|url=x}}</ref> She wrote about the "
        "[[Analytical Engine]]<ref>B</ref>.<!-- hidden -->\n"
        "[[File:Ada.jpg|thumb|A [[portrait]]]]\n"
        "== Early life ==\n"
        "Born in [[London]] on 10 December 1815.<br/>See [http://example.org the site].\n"
        "[[Category:1815 births]]\n[[fr:Ada Lovelace]]"
    )
    assert clean_wikitext(text) == (
        "Ada Lovelace was an English mathematician. She wrote about the Analytical Engine.\n\n"
        "Born in London on 10 December 1815.\nSee the site."
    )


def test_table_markup_and_entities() -> None:
    text = ("Intro&nbsp;text &amp; more.\n{| class=\"wikitable\" style=\"x\"\n|-\n! A !! B\n|-\n"
            "| colspan=2 | cell\n|}\nAfter the table.")
    out = clean_wikitext(text)
    assert out == "Intro text & more.\n\nAfter the table."  # &nbsp; becomes a plain space
    for junk in ("{|", "|}", "colspan", "style=", "wikitable"):
        assert junk not in out


def test_file_links_spanning_lines_and_unbalanced_quotes() -> None:
    text = ("Before.\n[[File:Tree.png|thumb|A tree for\n[[Pablo]] with two readings.]]\n"
            "After, the ''Iliad'''s hero.")
    assert clean_wikitext(text) == "Before.\n\nAfter, the Iliad's hero."


def test_issue_cases_keep_their_text() -> None:
    """The cleaning bugs a user found: link markup leaked, an apostrophe lost, a page swallowed
    by an unclosed template, the text of {{lang}} and its kin dropped."""
    assert clean_wikitext("Then [[X#Y|''{{lang|en|levelling}}'']] end. And qu'''Undertale'' after.") == (
        "Then levelling end. And qu'Undertale after.")
    assert clean_wikitext("Albedo ({{lang-la|albedo}}, meaning 'whiteness') is bright.") == (
        "Albedo (albedo, meaning 'whiteness') is bright.")
    assert clean_wikitext("Start {{cite web|url=x\nThe rest of the page.\n\nMore.") == (
        "Start\nThe rest of the page.\n\nMore.")


def test_content_templates_allow_list() -> None:
    cases = {
        "{{lang|fr|{{small|texte}}}}": "texte",
        "{{lang-de|Haus}}": "Haus",
        "{{transl|ja|ALA-LC|Tōkyō}}": "Tōkyō",
        "{{transl|ar|Qur'an}}": "Qur'an",
        "{{nihongo|Tokyo|東京|Tōkyō}}": "Tokyo (東京, Tōkyō)",
        "{{convert|10|km|mi}}": "10 km",
        "{{convert|5|to|7|m|ft|abbr=on}}": "5 to 7 m",
        "{{cvt|3|-|4|kg}}": "3-4 kg",
        "{{frac|3|1|2}}": "3 1/2",
        "{{circa|1900}}": "c. 1900",
        "{{nowrap|[[New York|NYC]] area}}": "[[New York|NYC]] area",
        "{{lang|1=grc|2=λόγος}}": "λόγος",
        "{{ndash}}": "–",
        "{{Infobox person|name=X}}": "",
        "{{cite book|title=T}}": "",
        "{{#if:x|y}}": "",
    }
    for markup, text in cases.items():
        assert render_braces(markup) == text, markup


def test_quotes_resolved_as_mediawiki_does() -> None:
    assert resolve_quotes("''Iliad'''s hero") == "Iliad's hero"
    assert resolve_quotes("'''bold''' and ''italic'' and '''''both'''''") == "bold and italic and both"
    assert resolve_quotes("l'''amour''") == "l'amour"  # odd bold and italic runs: apostrophe + italics
    assert resolve_quotes("''''four'''") == "'four"    # a run of 4: an apostrophe, then bold
    assert resolve_quotes("a '' b\nc ''' d") == "a  b\nc  d"  # per line: unbalanced runs go
