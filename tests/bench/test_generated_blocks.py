"""Every generated block in README.md and docs/ is what bench/readme_tables.py renders from
bench/results and experiments/results now: a result file changed without the pages rendered
again fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
import readme_tables

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("page", readme_tables.pages(), ids=lambda p: str(p.relative_to(BENCH.parent)))
def test_generated_blocks_are_current(page: Path) -> None:
    text = page.read_text()
    assert readme_tables.render_page(text) == text, (
        f"{page}: a generated block is stale; run .venv/bin/python bench/readme_tables.py")


def test_a_stale_block_is_found() -> None:
    page = next(p for p in readme_tables.pages() if "<!-- bench:realm_table " in p.read_text())
    text = page.read_text()
    start = text.index("<!-- bench:realm_table ")
    stale = text[:start] + text[start:].replace("|", "| 0.0 |", 1)
    assert readme_tables.render_page(stale) == text


def test_every_generated_block_has_its_results_file() -> None:
    """A page's block whose results file was deleted would stay as it is (render_page leaves it):
    every block a page holds must name a file that exists."""
    missing = [f"{page.relative_to(BENCH.parent)}: bench:{name} needs {readme_tables.result_path(name)}"
               for page in readme_tables.pages() for name in readme_tables.TABLES
               if f"<!-- bench:{name} " in page.read_text() and not readme_tables.result_path(name).is_file()]
    assert not missing, "\n".join(missing)


def test_results_live_with_what_makes_them() -> None:
    """bench/results holds the product benchmarks' results only (at most 30 files); every other
    results file is an experiment's, under experiments/results, and some page renders it."""
    import bench_tables
    import lab_tables

    product = sorted(p.name for p in bench_tables.RESULTS.iterdir())
    assert len(product) <= 30, product
    lab_names = {name for name, (folder, *_) in readme_tables.TABLES.items() if folder == lab_tables.RESULTS}
    assert not any(p.removesuffix(".json") in lab_names for p in product), "an experiment's result in bench/results"
