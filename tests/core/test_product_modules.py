"""realm_core holds what the pipeline and the query side run: every module of it is imported by
the product (realm_core itself, flows, tasks). A module only experiments/, bench/ or tests/
import is lab code and lives there."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("realm_core", "flows", "tasks")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module name `path` imports, and for `from m import n` also `m.n` (a submodule)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def test_every_realm_core_module_is_imported_by_the_product() -> None:
    imported: set[str] = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            imported |= _imports(path) - {_module(path)}
    modules = {_module(p) for p in (ROOT / "realm_core").rglob("*.py")} - {"realm_core"}
    lab_only = sorted(m for m in modules if m not in imported and not any(i.startswith(f"{m}.") for i in imported))
    assert lab_only == [], f"imported only by experiments/, bench/ or tests/: move them there: {lab_only}"
