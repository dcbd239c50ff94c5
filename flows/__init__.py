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


def end_process(code: object) -> None:
    """End a command-line process once its work is done and written, without the C++ teardown.

    Python's own shutdown runs as it would (non-daemon threads joined, atexit hooks, Prefect's
    embedded server among them, streams flushed), then `os._exit`. Exiting through the C
    library instead runs the static destructors of the native libraries loaded, and Arrow's
    CPU thread pool (its workers started by every threaded Parquet read) can be torn down while
    a worker is still joinable: `terminate called without an active exception`, SIGABRT, so a
    `realm evaluate` that had written its results exited -6 in a CI run. Nothing of the
    command's is left for those destructors: its files are closed by the `with` that wrote them.
    `code` is what SystemExit carries: None is 0, a message is printed and is 1."""
    import atexit
    import sys
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    # Python's own order: thread pools told to stop and non-daemon threads joined, then atexit
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # an interpreter without it: join what it would have joined
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(status & 0xFF)


def prefect_home() -> str:
    """PREFECT_HOME (default ~/.prefect), created with its parents before an embedded Prefect
    starts: Prefect makes only the last folder, and on a missing parent it could not create its
    database and waited out its whole startup timeout. A path that cannot be made is a
    RealmError naming it, at once."""
    from pathlib import Path

    from realm_core.errors import RealmError

    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RealmError(f"PREFECT_HOME={home}: cannot create it ({e.strerror or type(e).__name__}); "
                         "set PREFECT_HOME to a folder this user can write") from None
    if not home.is_dir():
        raise RealmError(f"PREFECT_HOME={home}: expected a folder, found a file")
    return str(home)


def quiet_prefect_failures() -> None:
    """Keep Prefect's own failure records (a traceback per failed task and flow) off the
    console: the command prints the failure once, as its `error:` line. Prefect's records still
    reach its API (the run's logs in the UI); `--verbose` leaves the console as Prefect sets it."""
    import logging

    class _NoPrefectFailures(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not (record.name.startswith("prefect") and record.levelno >= logging.ERROR)

    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _NoPrefectFailures) for f in handler.filters):
            handler.addFilter(_NoPrefectFailures())
