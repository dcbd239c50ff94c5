"""Presets: one short YAML file each in this folder (tiny.yaml for the tests, demo.yaml for a
2-core laptop, paper.yaml for GPUs), read top to bottom like nanoGPT's config/ files. A preset
sets only what differs from each stage config's defaults; `realm_core.config.load_config`
validates it, then a `--config` YAML and `--set` overrides go on top. `realm config --preset
NAME` prints the resolved result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent


def _load(path: Path) -> dict[str, Any]:
    """One preset file (the project's own: safe YAML, a mapping of stage sections)."""
    import yaml

    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(tree, dict):
        raise ValueError(f"{path}: expected a mapping of stage sections")
    return tree


# smallest first (the order of the run forms' choice and of `--help`), any other preset after them
ORDER = ("tiny", "demo", "laptop", "gpu", "paper")
# what each is for, in one sentence: the CLI's --help, the run forms and prefect.yaml read these
DESCRIPTIONS = {
    "tiny": "the tests' corpus, each stage under a minute",
    "demo": "every bundled file, sized for a 2-core laptop",
    "laptop": "REALM's measured gain and Table 1 under its own fine-tuning, overnight on 2 cores",
    "gpu": "the same recipe on one GPU in minutes",
    "paper": "REALM's settings on a full enwiki dump, for GPUs",
}
_loaded: dict[str, dict[str, Any]] = {}


def __getattr__(name: str) -> Any:
    """`PRESETS`, {name: its file's sections}, read on first use (the CLI's --help names the
    presets from DESCRIPTIONS without parsing a file)."""
    if name != "PRESETS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _loaded:
        _loaded.update({p.stem: _load(p) for p in sorted(
            FOLDER.glob("*.yaml"), key=lambda p: (ORDER.index(p.stem) if p.stem in ORDER else len(ORDER), p.stem))})
    return _loaded
