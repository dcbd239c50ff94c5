"""What the pages' generated tables share: a result as json.loads reads it, and the few ways the
tables write an interval, a duration, a machine and a stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Result = dict[str, Any]  # a results file, as json.loads reads it


def interval(d: float | None, ci: list[float] | None) -> str:
    return "-" if d is None or ci is None else f"{100 * d:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def minutes(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"


def machine(result: Result) -> str:
    cpu = result["cpu"]
    flags = ", ".join(cpu["flags"]) or "none of avx2, avx512_bf16, amx"
    return f"{cpu['model']} ({cpu['cores']} cores; {flags}), {result['threads']} threads, {result['precision']}"


def stage_title(name: str) -> str:
    """A stage's title as the pipeline's own stage table gives it (realm_core.graph.stages)."""
    from realm_core.graph.stages import BY_NAME

    return BY_NAME[name].title if name in BY_NAME else name


def resumed(stats: dict[str, Any]) -> str:
    """", resumed at step 475" for a run stopped and resumed (its wall is the sum of its parts)."""
    at = stats.get("resumed_at_steps") or []
    return f", resumed at step{'s' if len(at) > 1 else ''} {', '.join(f'{s:,}' for s in at)}" if at else ""
