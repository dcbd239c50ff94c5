"""Prefect flows: one per stage, the full pipeline, and the command line.

Set before anything here imports Prefect: an embedded (ephemeral) Prefect server creates and
migrates its SQLite database on its first start, which took longer than Prefect's default 20 s
wait on a busy 2-core machine (`make demo` failed with "Timed out while attempting to connect to
ephemeral Prefect API server"). A user's own setting wins."""

import os

EPHEMERAL_STARTUP_TIMEOUT_S = 300
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT_S))
