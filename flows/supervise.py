"""No process of a run outlives it: `realm pipeline` forks before Prefect starts, and

- the child runs the pipeline in a process group of its own, which the embedded Prefect server
  (uvicorn, started by Prefect without a session of its own) and any worker join; a thread of
  the child watches its parent and kills the whole group the moment the parent is gone, even
  while the main thread is inside a long torch call (SIGKILL of `realm pipeline` itself);
- the parent waits for the child, passes SIGINT and SIGTERM on to its group, and once the child
  has ended, however it ended (SIGKILL included), kills what is left of the group.

Killed work resumes from its checkpoints when the command runs again.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:  # re-parented: the supervisor is gone
            os.killpg(0, signal.SIGKILL)
        time.sleep(0.5)


def supervise(grace_seconds: float = 10.0) -> None:
    """Return in the child, which then runs the command; never return in the parent, which exits
    with the child's status once the child's group is gone. Where `fork` is missing (not POSIX)
    it returns at once and nothing is supervised."""
    if not hasattr(os, "fork"):
        return
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)  # also set by the parent: whichever runs first, the group exists
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="realm-supervisor-watch").start()
        return

    try:
        os.setpgid(child, child)
    except (PermissionError, ProcessLookupError):
        pass  # the child has set it already (or exec'd, or died: waitpid says)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(child, signum)
        except ProcessLookupError:
            pass
        if signum == signal.SIGTERM:  # a command asked to stop, stops: hard after the grace period
            threading.Timer(grace_seconds, lambda: _kill_group(child)).start()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    _kill_group(child)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
