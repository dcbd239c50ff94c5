"""Prefect flows: one per stage, the full pipeline, and the command line.

Set before anything here imports Prefect: an embedded (ephemeral) Prefect server creates and
migrates its SQLite database on its first start, which took longer than Prefect's default 20 s
wait on a busy 2-core machine (`make demo` failed with "Timed out while attempting to connect to
ephemeral Prefect API server"). A user's own setting wins."""

import os

EPHEMERAL_STARTUP_TIMEOUT_S = 300
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT_S))


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process as Ctrl-C does, through SystemExit, so that `finally` blocks
    and atexit hooks run. Prefect stops its embedded server in an atexit hook, and SIGTERM's
    default action skips those hooks. A `make demo` stopped with `kill` therefore left its
    uvicorn server running, orphaned. Prefect's own handler, armed while a flow runs, hands
    the signal on to this one. Called by the command-line entry points (`realm`, `make demo`),
    never at import: a Prefect worker's flow-run processes keep Prefect's handling. A torchrun
    rank (LOCAL_RANK set) keeps the default action too: torchrun stops ranks with SIGTERM, and a
    rank blocked in a collective would not reach a Python handler before torchrun's SIGKILL."""
    import signal
    import sys

    if "LOCAL_RANK" in os.environ:
        return
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
