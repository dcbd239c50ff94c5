"""What every experiment script shares: where its results go (experiments/results/, beside the
scripts, rendered into its page by experiments/lab_tables.py) and the config arguments the CLI
takes (`--preset`, `--config`, `--set`, with the CLI's own help texts)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from peers import write_result as _write

from realm_core.config import PipelineConfig, load_config

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict[str, Any]) -> Path:
    """experiments/results/<name>.json, the numbers its page's tables are rendered from."""
    return _write(name, result, RESULTS)


def config_arguments(ap: argparse.ArgumentParser, preset: str = "demo", config: str | None = None) -> None:
    """`--preset`, `--config` and `--set` as `realm` takes them (their help is the pipeline's)."""
    from flows.settings import PARAMETER_DOCS

    ap.add_argument("--preset", default=preset, help=PARAMETER_DOCS["preset"] + " (default: %(default)s)")
    ap.add_argument("--config", default=config, help=PARAMETER_DOCS["config_file"])
    ap.add_argument("--set", dest="overrides", action="append", default=[], help=PARAMETER_DOCS["overrides"])


def config_from(args: argparse.Namespace, *more: str) -> PipelineConfig:
    """The config `config_arguments`' values name, with `more` overrides after them."""
    return load_config(args.preset, args.config, [*args.overrides, *more])
