"""How a command-line process ends (`flows.end_process`): Python's shutdown work done, its exit
status kept, and no teardown after it, where a native thread pool's destructor could abort a
command that had finished its work (`terminate called without an active exception`, -6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ENDING = """
import atexit, sys, threading, time
from pathlib import Path
import flows

out = Path(sys.argv[1])

class Finalized:
    def __del__(self):
        sys.stderr.write("finalized by the interpreter's teardown\\n")

kept = Finalized()  # a module global: only the interpreter's teardown deletes it
atexit.register(lambda: (out / "atexit").write_text("ran"))

def late():
    time.sleep(0.3)
    (out / "thread").write_text("joined")

threading.Thread(target=late).start()
from concurrent.futures import ThreadPoolExecutor
idle = ThreadPoolExecutor(1)  # never shut down: its idle worker is told to stop, as at any exit
idle.submit(lambda: None).result()
sys.stdout.write("written, not flushed")  # a pipe: block-buffered
flows.end_process(eval(sys.argv[2]))
"""


def end(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ENDING, str(tmp_path), code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_process_ends_with_its_status_after_pythons_shutdown_work_and_no_teardown(tmp_path: Path) -> None:
    r = end(tmp_path, "3")
    assert r.returncode == 3, r.stderr
    assert r.stdout == "written, not flushed"
    assert (tmp_path / "thread").read_text() == "joined"  # a non-daemon thread is waited for
    assert (tmp_path / "atexit").read_text() == "ran"  # Prefect stops its embedded server here
    assert "finalized" not in r.stderr  # the interpreter's (and the C library's) teardown never ran


def test_systemexits_none_and_message_become_0_and_1(tmp_path: Path) -> None:
    r = end(tmp_path, "None")
    assert r.returncode == 0, r.stderr
    r = end(tmp_path, "'error: it went wrong'")
    assert r.returncode == 1
    assert "error: it went wrong" in r.stderr


def test_the_realm_command_ends_through_it(tmp_path: Path) -> None:
    """`python -m flows.cli` (the console script's `main`): an unknown command is typer's usage
    error, exit 2, and --help is 0 with its text, both through `end_process`."""
    code = "import flows, flows.cli, sys; flows.end_process = lambda c: print('ENDED', c) or sys.exit(c); flows.cli.main()"
    r = subprocess.run([sys.executable, "-c", code, "no-such-command"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "ENDED 2" in r.stdout, (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "Usage" in r.stdout, r.stderr
