"""Render the generated tables of README.md and docs/ from the results files (their numbers come
only from there): each `<!-- bench:NAME -->` block from NAME.json, by the renderer that the
product benchmarks (bench/bench_tables.py, bench/results/) or the experiments
(experiments/lab_tables.py, experiments/results/) declare for it.

    .venv/bin/python bench/readme_tables.py          # rewrites every marked block
    .venv/bin/python bench/readme_tables.py NAME...  # just those
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import bench_tables
import lab_tables
from render import ROOT, Result

# {block name: (results folder, result file name, renderer)}
TABLES: dict[str, tuple[Path, str, Callable[[Result], str]]] = {
    name: (m.RESULTS, m.SOURCES.get(name, name), fn)
    for m in (bench_tables, lab_tables) for name, fn in m.TABLES.items()}
# blocks rendered from several result files at once: {block name: renderer}
COLLECTIONS: dict[str, Callable[[], str]] = {**bench_tables.COLLECTIONS, **lab_tables.COLLECTIONS}


def result_path(name: str) -> Path:
    """The results file block `name` is rendered from."""
    folder, source, _ = TABLES[name]
    return folder / f"{source}.json"


def main() -> None:
    main_with(sys.argv[1:])  # e.g. `readme_tables.py pretrain openqa`: rewrite just those tables


def main_with(names: list[str]) -> None:
    """Rewrite the generated blocks named (every block when none is named) on every page."""
    only = set(names)
    unknown = only - set(TABLES) - set(COLLECTIONS)
    if unknown:
        raise SystemExit(f"no generated block named {sorted(unknown)}; the blocks are {sorted([*TABLES, *COLLECTIONS])}")
    for page in pages():
        text = page.read_text()
        rendered = render_page(text, only)
        if rendered != text:
            page.write_text(rendered)


def pages() -> list[Path]:
    """README.md and every page under docs/: each may hold generated blocks."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def render_page(text: str, only: set[str] | frozenset[str] = frozenset()) -> str:
    """`text` with each `<!-- bench:NAME -->` block rendered again from its results file (or the
    files a `COLLECTIONS` renderer reads)."""
    for name in [*TABLES, *COLLECTIONS]:
        if only and name not in only:
            continue
        pattern = re.compile(rf"<!-- bench:{name} .*?<!-- /bench:{name} -->", re.DOTALL)
        found = pattern.search(text)
        if not found:
            continue
        if name in COLLECTIONS:
            body = COLLECTIONS[name]()
        else:
            path = result_path(name)
            if not path.is_file():
                continue
            body = TABLES[name][2](json.loads(path.read_text()))
        block = f"<!-- bench:{name} (bench/readme_tables.py) -->\n{body}\n<!-- /bench:{name} -->"
        text = text[:found.start()] + block + text[found.end():]
    return text


if __name__ == "__main__":
    main()
