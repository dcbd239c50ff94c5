"""Training curves for stage reports: a markdown table of evenly spaced points and a PNG plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """The values resampled to `width` characters, lowest ▁ to highest █."""
    if not values:
        return ""
    picked = [values[min(len(values) - 1, i * len(values) // width)] for i in range(min(width, len(values)))]
    lo, hi = min(picked), max(picked)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))] for v in picked)


def curve_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str], points: int = 10) -> str:
    """`points` rows spread over the run (first and last included) as a markdown table, plus a
    sparkline per column."""
    if not rows:
        return "_no steps recorded_"
    n, k = len(rows), min(points, len(rows))
    picks = sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i in picks:
        lines.append("| " + " | ".join(_fmt(rows[i][c]) for c in columns) + " |")
    for c in columns[1:]:
        lines.append(f"\n`{c}` {sparkline([float(r[c]) for r in rows])}")
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def plot_curves(rows: Sequence[dict[str, Any]], x: str, ys: Sequence[str], path: Path,
                title: str) -> Path:
    """One panel per series against `x`, saved as PNG (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ys), figsize=(4.2 * len(ys), 3.2), squeeze=False)
    xs = [r[x] for r in rows]
    for ax, y in zip(axes[0], ys, strict=True):
        ax.plot(xs, [r[y] for r in rows], linewidth=1.2)
        ax.set_xlabel(x)
        ax.set_title(y)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
