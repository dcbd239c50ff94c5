"""A process's resident memory while a piece of work runs: what each stage's report and the
demo's record state as its peak, so that a stage that holds too much is named; and the heap a
stage frees handed back to the system, during the stage (`TrimmedHeap`) and after it
(`release_free_memory`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import threading
from collections.abc import Callable
from types import TracebackType

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float | None:
    """This process's resident memory now (Linux's /proc/self/statm), or None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """The largest resident memory of this process seen while the block runs, sampled every
    `every` seconds by a daemon thread (and at both ends): `mb` once the block has ended. Where
    the lifetime peak (`getrusage`) rose during the block above every sample, that is taken."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.mb: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.every):
            self._see(resident_mb())

    def _see(self, mb: float | None) -> None:
        if mb is not None:
            self.mb = max(self.mb or 0.0, mb)

    @staticmethod
    def _lifetime_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    def __enter__(self) -> PeakMemory:
        self._before = self._lifetime_mb()
        self._see(resident_mb())
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()
        self._see(resident_mb())
        after = self._lifetime_mb()
        if after > self._before:  # a new lifetime peak was reached inside the block
            self._see(after)
        if self.mb is not None:
            self.mb = round(self.mb, 1)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)
    return trim


def release_free_memory() -> float | None:
    """Hand memory freed by the work that just ended back to the system: a garbage collection,
    then glibc's `malloc_trim(0)`. Without it, memory a stage freed (tokenised batches, tensors
    below glibc's mmap threshold) stays resident, and one process that runs stage after stage
    (`make demo`) grows by each stage's leftovers. Returns the resident MB after, or None where
    there is no glibc (the collection still runs)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return None
    trim(0)
    return resident_mb()


class TrimmedHeap:
    """While the block runs, glibc's `malloc_trim(0)` every `every` seconds from a daemon thread.

    A training loop frees and allocates tensors of changing shapes (a batch's longest row sets
    them) step after step; glibc keeps what was freed in its arenas for reuse, so a long stage's
    resident memory climbs far above what it holds: a REALM pretraining run of 1,000 steps of 8
    on 2 cores grew to 10.8 GB resident, of which one `malloc_trim` returned 7.3 GB. Trimming on a
    timer bounds it without touching any loop; the work that needs the pages again faults them
    back in. A no-op where there is no glibc."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.trims = 0
        self._trim = _malloc_trim()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trim-heap", daemon=True)

    def _run(self) -> None:
        assert self._trim is not None
        while not self._done.wait(self.every):
            self._trim(0)
            self.trims += 1

    def __enter__(self) -> TrimmedHeap:
        if self._trim is not None:
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
