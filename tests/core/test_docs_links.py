"""Every relative link and anchor in README.md, CONTRIBUTING.md and docs/ resolves: the file
exists and, for `#anchor`, a heading of that page has it (GitHub's slugs). Links inside code
blocks are text, not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return ({slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)}
            | set(re.findall(r'<a id="([^"]+)"></a>', text)))


def links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(page.read_text()))
            if not re.match(r"[a-z]+:", m.group(1))]  # http:, https:, mailto: are not checked offline


def broken(page: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no heading with that anchor in {dest.name}")
    return out


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert page.is_file(), f"{page} is missing"
    assert broken(page) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [no anchor](#nope) `[code](x.md)`\n")
    assert broken(page) == ["missing.md: no such file", "#nope: no heading with that anchor in p.md"]


def test_every_experiment_page_is_in_the_experiments_index() -> None:
    folder = Path(__file__).resolve().parents[2] / "docs" / "experiments"
    index = (folder / "README.md").read_text()
    missing = [p.name for p in folder.glob("*.md") if p.name != "README.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/experiments/README.md does not list {missing}"
