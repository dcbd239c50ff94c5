"""The copy curve under the reading table (bench/readme_tables.py `_copy_curve_table`): each
measured step's row holds the training accuracy of the steps just before it and the held-out
readings stored at that step, after the starting reader's row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import readme_tables  # noqa: E402


def test_each_measured_step_is_a_row_with_its_window_and_its_heldout_readings() -> None:
    result = json.loads((BENCH / "results" / "realm_reading_bf16.json").read_text())
    copy = result["copy_training"]
    copy["eval_every"] = 2
    copy["curve"] = [{"step": 1.0, "loss": 3.0, "span_accuracy": 0.0},
                     {"step": 2.0, "loss": 2.0, "span_accuracy": 0.5,
                      "heldout_oracle_accuracy": 0.25, "heldout_null_accuracy": 0.125},
                     {"step": 3.0, "loss": 1.0, "span_accuracy": 1.0},
                     {"step": 4.0, "loss": 1.0, "span_accuracy": 1.0,
                      "heldout_oracle_accuracy": 0.5, "heldout_null_accuracy": 0.25}]
    rows = [line for line in readme_tables.realm_reading_table(result).splitlines()
            if line.startswith("| ") and line.count("|") == 6 and line[2].isdigit()]
    start = result["readers"]["warm-up reader"]
    assert rows[0].startswith(f"| 0 | - | {100 * start['oracle_block_accuracy']:.1f} |")
    assert rows[1:] == ["| 2 | 25.0 | 25.0 | 12.5 | +12.5 |", "| 4 | 100.0 | 50.0 | 25.0 | +25.0 |"]
    # a copy run measured only at its end has no curve table
    del copy["eval_every"]
    copy["curve"] = [{"step": 1.0, "loss": 3.0, "span_accuracy": 0.0}]
    assert "as it trained" not in readme_tables.realm_reading_table(result)
