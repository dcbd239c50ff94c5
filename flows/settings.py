"""What every flow resolves the same way: the config (preset + file + overrides) and the root."""

from __future__ import annotations

from realm_core.config import PipelineConfig, load_config, work_dir


def resolve(preset: str, config_file: str | None, overrides: list[str] | None,
            root: str | None) -> tuple[PipelineConfig, str]:
    cfg = load_config(preset, config_file, overrides or [])
    return cfg, root or str(work_dir() / "artifacts")
