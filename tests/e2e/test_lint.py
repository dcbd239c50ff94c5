"""Style promises checked in CI: mypy --strict on realm_core, flows, tasks, bench and experiments, ruff everywhere,
no Prefect in realm_core, no pickle on user files, and the layers: no import circle, no upward
import."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_mypy_strict_on_realm_core_flows_tasks_bench_and_experiments() -> None:
    """bench/ and experiments/ too: their scripts call realm_core directly, and a signature that
    moved would otherwise show only when a script runs (bench/gpu.py: on a lent GPU, against its
    clock). Two runs: each folder's scripts import their neighbours as top-level modules."""
    for folders in (["realm_core", "flows", "tasks", "bench"], ["experiments"]):
        r = subprocess.run([str(BIN / "mypy"), *folders], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "MYPYPATH": "bench"})
        assert r.returncode == 0, r.stdout + r.stderr
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff() -> None:
    r = subprocess.run([str(BIN / "ruff"), "check", "realm_core", "tasks", "flows", "tests", "bench", "experiments"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_house_rules() -> None:
    for path in (ROOT / "realm_core").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import prefect|from prefect)", text, re.M), path
    for package in ("realm_core", "tasks", "flows"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"^\s*import pickle|pickle\.load", text, re.M), path


def test_every_cached_stage_goes_through_cached_stage() -> None:
    """key -> lookup -> write -> publish lives in CachedStage alone; the one other writer is the
    index, whose versions are named by the retriever's step, not by a cache key."""
    writers = {str(p.relative_to(ROOT)) for p in (ROOT / "realm_core").rglob("*.py")
               if re.search(r"\bstore\.(write|lookup)\(", p.read_text())}
    assert writers == {"realm_core/store/cache.py", "realm_core/retrieval/versions.py"}, writers


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(top_level_only: bool) -> dict[str, set[str]]:
    """Project module -> the project modules it imports (at load time only, or anywhere)."""
    paths = [p for package in ("realm_core", "tasks", "flows") for p in (ROOT / package).rglob("*.py")]
    known = {_module(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text())
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        found: set[str] = set()
        for node in nodes:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module, *(f"{node.module}.{a.name}" for a in node.names)] \
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            found |= {n for n in names if n in known}
        graph[_module(path)] = found - {_module(path)}
    return graph


def test_no_import_circle() -> None:
    graph = _imports(top_level_only=True)
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(module):], module]))
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            if not module.startswith(dep + "."):  # a package's __init__ importing its own modules
                visit(dep, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


# realm_core's layers, lowest first: the top-level modules (the artifact store and the knowledge
# corpus's versions among them), the science packages in pipeline order, the stage graph, the
# query side over it, and `realm add` (which reads the graph). An import (lazy ones included) may
# only go down or sideways; a module takes the layer of the longest prefix that names it.
LAYERS = ("realm_core", "realm_core.ingest", "realm_core.spans", "realm_core.retrieval",
          "realm_core.pretrain", "realm_core.openqa", "realm_core.graph", "realm_core.query",
          "realm_core.knowledge.add", "realm_core.system_bundle")


def _layer(module: str) -> int:
    return max(i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + "."))


def test_no_upward_import() -> None:
    upward = [f"{m} -> {d}" for m, deps in _imports(top_level_only=False).items() for d in deps
              if m.startswith("realm_core") and (not d.startswith("realm_core") or _layer(d) > _layer(m))]
    tasks_up = [f"{m} -> {d}" for m, deps in _imports(top_level_only=False).items() for d in deps
                if m.startswith("tasks") and d.startswith("flows")]
    assert not upward + tasks_up, upward + tasks_up


def test_every_shape_letter_in_a_comment_is_in_its_module_legend() -> None:
    """STYLE: shape comments such as `# (B, K, T)` read against a fixed legend at the top of the
    module (`Shapes: B batch, K blocks, ...`); a letter the legend lacks is a comment a reader
    cannot decode."""
    missing = {}
    for path in (ROOT / "realm_core").rglob("*.py"):
        text = path.read_text()
        found = re.search(r"Shapes?: (.*?)(?:\.\n|\n\n|\"\"\")", text, re.S)
        legend = set(re.findall(r"\b([A-Z])\b", found.group(1))) if found else set()
        used = {letter for shape in re.findall(r"#[^\n]*?\(([A-Z0-9_*\-+, ]+,?)\)", text)
                for letter in re.findall(r"\b([A-Z])\b", shape)}
        if used - legend:
            missing[str(path.relative_to(ROOT))] = sorted(used - legend)
    assert not missing, missing
