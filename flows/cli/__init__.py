"""`realm`: the command line. Every stage command resolves its stage through the stage graph
(realm_core/graph/stages.py) with the same config options (--preset, --config FILE, --set
stage.field=v), so the cache keys are the Prefect flows' own: `realm chunk` after `realm ingest`
reuses the documents, and on a fresh root it ingests first. `realm pipeline` runs the Prefect
flow with an embedded (ephemeral) Prefect.

The commands are grouped by stage in this package's modules; importing them registers them on
`app` (flows/cli/common.py), which none of them imports back.
"""

from __future__ import annotations

from flows.cli import corpus, data, knowledge, openqa, pretrain, query, retrieval, tools  # noqa: F401  (registers the commands)
from flows.cli.common import app

__all__ = ["app", "main"]


def main() -> None:
    """The `realm` console script: the app, with SIGTERM ending it cleanly (its embedded Prefect
    server stopped; see `flows.exit_on_sigterm`) and the process ended without the native
    libraries' teardown (`flows.end_process`)."""
    from flows import end_process, exit_on_sigterm

    exit_on_sigterm()
    try:
        code: object = app()
    except SystemExit as e:
        code = e.code
    end_process(code)
