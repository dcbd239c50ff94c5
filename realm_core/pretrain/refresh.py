"""Index refresh during pretraining (REALM §3.4, "asynchronous MIPS refreshes").

Every `refresh_every` steps the loop hands the refresher a snapshot of the encoders. The
refresher publishes them as a `retriever` artifact, re-embeds every block with the document
encoder and builds index version v<retriever step> (the `refresh_index` stage). Asynchronous by
default, like the paper's separate index-builder job: training goes on with the old index and
swaps in the new one at the start of the first step after it is ready. `sync=True` waits, which
makes a run deterministic (and resumable bit for bit).
"""

from __future__ import annotations

import contextvars
import copy
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from realm_core.retrieval.index import MipsIndex


@dataclass
class IndexHandle:
    index: MipsIndex
    step: int  # the retriever step of the document encoder that embedded the blocks


BuildIndex = Callable[[Any, Any, int], IndexHandle]  # (query_encoder, doc_encoder, step) -> index


class IndexRefresher:
    def __init__(self, build: BuildIndex, sync: bool) -> None:
        self.build = build
        self.sync = sync
        self.blocked_seconds = 0.0
        self.skipped = 0
        self._pool = None if sync else ThreadPoolExecutor(1, thread_name_prefix="refresh-index")
        self._future: Future[IndexHandle] | None = None
        self._ready: IndexHandle | None = None

    @property
    def busy(self) -> bool:
        return self._future is not None and not self._future.done()

    def submit(self, query_encoder: Any, doc_encoder: Any, step: int) -> bool:
        """Start a refresh from the encoders' weights now; False if one is still running (the
        next refresh will carry newer weights anyway)."""
        if self.busy:
            self.skipped += 1
            return False
        snapshot = (copy.deepcopy(query_encoder).eval(), copy.deepcopy(doc_encoder).eval())
        if self._pool is None:
            t0 = time.perf_counter()
            self._ready = self.build(*snapshot, step)
            self.blocked_seconds += time.perf_counter() - t0
        else:
            # the caller's context travels, so an orchestrator's run (a Prefect subflow) nests
            context = contextvars.copy_context()
            build = self.build
            self._future = self._pool.submit(lambda: context.run(build, *snapshot, step))
        return True

    def poll(self) -> IndexHandle | None:
        """A finished refresh, once; re-raises a failed one."""
        if self._ready is not None:
            ready, self._ready = self._ready, None
            return ready
        if self._future is not None and self._future.done():
            future, self._future = self._future, None
            return future.result()
        return None

    def wait(self) -> IndexHandle | None:
        """Block until the running refresh (if any) is done; the time counts as blocked."""
        if self._future is not None:
            t0 = time.perf_counter()
            self._future.exception()
            self.blocked_seconds += time.perf_counter() - t0
        return self.poll()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
