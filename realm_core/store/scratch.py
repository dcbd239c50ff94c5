"""Where an artifact is made before it is published, and the one atomic swap that replaces a
published one: run-scoped scratch directories named by host and process (those of killed
processes swept at the next write) and Linux's renameat2 exchange. Used by the artifact store
(realm_core/store/artifacts.py)."""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from pathlib import Path


def scratch_name(kind: str, key: str) -> str:
    """A run-scoped temp directory name that says which host and process own it."""
    host = socket.gethostname().replace(".", "_")
    return f"{kind}-{key}.{host}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def sweep_scratch(scratch_root: Path) -> list[str]:
    """Remove the temp directories that processes of this host left when they were killed
    (they would stay forever otherwise); those of live processes and other hosts stay.
    Returns the names removed."""
    host = socket.gethostname().replace(".", "_")
    removed = []
    for entry in scratch_root.iterdir():
        parts = entry.name.split(".")
        if len(parts) < 4 or parts[-3] != host or not parts[-2].isdigit():
            continue
        if not _process_alive(int(parts[-2])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic rename (Linux renameat2 RENAME_EXCHANGE). False where the
    OS or file system has no such call; the caller then falls back to two renames."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
