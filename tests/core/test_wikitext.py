from realm_core.ingest.wikitext import clean_wikitext, drop_nested_braces


def test_nested_templates_and_tables_are_removed() -> None:
    assert drop_nested_braces("a{{x|{{y}}|z}}b{|\n|c{{d}}\n|}e") == "abe"
    # `{{name|}}` ends with an empty parameter, not a table close
    assert drop_nested_braces("a{{cite|}}b") == "ab"
    assert drop_nested_braces("unclosed {{tpl|x") == "unclosed "


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
