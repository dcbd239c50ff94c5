"""A first run on a fresh machine: the embedded Prefect creates its database with every core
busy, and a flow still runs (it once timed out after Prefect's default 20 s)."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
FLOW = """
import flows
from prefect import flow

@flow
def first_run() -> int:
    return 42

print("result", first_run())
"""


def _busy() -> None:
    while True:
        pass


def test_importing_flows_raises_the_ephemeral_startup_timeout() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}
    code = ("import flows\nfrom prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as s\n"
            "print(s.value())")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(float(r.stdout.split()[-1])) == 300
    # a user's own value wins
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=env | {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "45"})
    assert int(float(r.stdout.split()[-1])) == 45


@pytest.mark.slow
def test_fresh_prefect_home_under_cpu_load(tmp_path: Path) -> None:
    """Every core busy, an empty PREFECT_HOME: the embedded server's first start (database
    creation and migrations) must finish and the flow run complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    hogs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(os.cpu_count() or 2)]
    for h in hogs:
        h.start()
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", FLOW], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=400)
        seconds = time.monotonic() - t0
    finally:
        for h in hogs:
            h.terminate()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "result 42" in r.stdout
    print(f"first embedded run with {len(hogs)} busy cores: {seconds:.1f} s")


WAITING_FLOW = """
import time
import flows
from prefect import flow

flows.exit_on_sigterm()  # as `realm` and `make demo` do

@flow
def waits() -> None:
    print("running", flush=True)
    time.sleep(300)

waits()
"""


@pytest.mark.slow
def test_sigterm_stops_the_embedded_prefect_server_too(tmp_path: Path) -> None:
    """`kill` on a command running a flow on the embedded Prefect: the command exits and its
    uvicorn server with it. With SIGTERM's default action Prefect's atexit hook never ran and the
    server stayed up, orphaned (a stopped `make demo` left one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    p = subprocess.Popen([sys.executable, "-c", WAITING_FLOW], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    servers: list[psutil.Process] = []
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if "running" in line:
                break
        servers = [c for c in psutil.Process(p.pid).children(recursive=True)
                   if "uvicorn" in " ".join(c.cmdline())]
        assert servers, "the flow ran without an embedded server to check"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(servers, timeout=30)
        assert not alive, f"the embedded server outlived its command: {[s.pid for s in alive]}"
    finally:
        for proc in [p, *servers]:
            try:
                proc.kill()
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass
