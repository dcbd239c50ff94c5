import pytest


@pytest.fixture(autouse=True)
def _in_prefect_harness(prefect_harness: None) -> None:
    """Every test here runs against the session's one Prefect test harness."""
