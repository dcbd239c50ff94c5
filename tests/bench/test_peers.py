"""bench/peers.py: whether a run logged an optional curve column, read one way everywhere; bad
input refused as every `realm` command refuses it."""

from __future__ import annotations

import pytest
from peers import fail, logged


def test_a_column_is_logged_only_where_every_row_holds_a_value() -> None:
    assert logged([{"p_holder": 0.0}, {"p_holder": 0.2}], "p_holder")  # 0 is a value
    assert not logged([{"p_holder": 0.1}, {}], "p_holder")  # a checkpoint's rows from before it
    assert not logged([{"p_holder": None}], "p_holder")  # a results file that kept the key
    assert not logged([], "p_holder")


def test_bad_input_says_error_on_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        fail("runs.yaml: expected a mapping of runs")
    assert stop.value.code == 2
    assert capsys.readouterr().err == "error: runs.yaml: expected a mapping of runs\n"
