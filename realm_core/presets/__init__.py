"""Presets: one short YAML file each in this folder (tiny.yaml for the tests, demo.yaml for a
2-core laptop, paper.yaml for GPUs), read top to bottom like nanoGPT's config/ files. A preset
sets only what differs from each stage config's defaults; `realm_core.config.load_config`
validates it, then a `--config` YAML and `--set` overrides go on top. `realm config --preset
NAME` prints the resolved result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FOLDER = Path(__file__).resolve().parent


def _load(path: Path) -> dict[str, Any]:
    """One preset file (the project's own: safe YAML, a mapping of stage sections)."""
    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(tree, dict):
        raise ValueError(f"{path}: expected a mapping of stage sections")
    return tree


# smallest first (the order of the run forms' choice and of `--help`), any other preset after them
ORDER = ("tiny", "demo", "laptop", "gpu", "paper")
PRESETS: dict[str, dict[str, Any]] = {
    p.stem: _load(p) for p in sorted(FOLDER.glob("*.yaml"),
                                     key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else len(ORDER), p.stem))}
