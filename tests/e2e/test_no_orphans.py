"""`realm pipeline` killed, SIGKILL included, leaves no process of its run: neither its worker
nor the embedded Prefect server it started (uvicorn), whichever of its processes is killed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _run_processes(work: Path) -> dict[int, str]:
    """pid -> command line of every process whose environment names this run's work dir."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if f"REALM_WORK_DIR={work}".encode() in environ:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def _wait_for(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("victim", ["the command", "its worker"])
def test_a_killed_pipeline_leaves_no_process(victim: str, shared_data: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {**os.environ, "REALM_WORK_DIR": str(work), "PREFECT_HOME": str(tmp_path / "prefect")}
    top = subprocess.Popen([sys.executable, "-m", "flows.cli", "pipeline", "--preset", "tiny"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert _wait_for(lambda: any("uvicorn" in c for c in _run_processes(work).values()), 180), \
            "the embedded Prefect server never started"
        worker = next(p for p, c in _run_processes(work).items() if p != top.pid and "flows.cli pipeline" in c)
        os.kill(top.pid if victim == "the command" else worker, signal.SIGKILL)
        assert _wait_for(lambda: not _run_processes(work), 20), _run_processes(work)
        assert top.wait(10) != 0
    finally:
        for pid in _run_processes(work):
            os.kill(pid, signal.SIGKILL)
        top.kill()
