"""What every command shares: the Typer apps, the config options, error printing, the stage
report, and the resolver a command runs its stages through (realm_core/graph/stages.py: the same
graph and cache keys as the Prefect flows, with a plain call as the hook)."""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from flows.cli.progress_bar import RichProgress, console
from realm_core.errors import RealmError
from realm_core.presets import DESCRIPTIONS as PRESET_DESCRIPTIONS

if TYPE_CHECKING:
    from realm_core.graph.resolver import Resolver, StageRun

app = typer.Typer(
    help="REALM pipeline: ingest -> chunk -> (spans, warm start, index, pretrain, QA). "
         "Artifacts go to --root (default $REALM_WORK_DIR/artifacts).",
    no_args_is_help=True, rich_markup_mode="rich", pretty_exceptions_enable=False)
data_app = typer.Typer(help="The data sources registry (data/sources.yaml): list and fetch.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")
out = Console(markup=False)  # reports and values hold user text: print it as it is

Preset = Annotated[str, typer.Option("--preset", "-p", help="; ".join(f"{k}: {v}" for k, v in PRESET_DESCRIPTIONS.items()))]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", exists=True, dir_okay=False,
                                                    help="YAML file of stage sections")]
Overrides = Annotated[list[str] | None, typer.Option(
    "--set", "-s", help="override one field, e.g. --set chunk.max_wordpieces=128 (repeatable)")]
Root = Annotated[str | None, typer.Option(help="artifact root (path or fsspec URL)")]
Force = Annotated[bool, typer.Option("--force", help="recompute this stage even if it is cached "
                                                     "(never its upstream stages)")]
Dask = Annotated[str | None, typer.Option(
    help="run the stage's units (source files, shards of blocks) on Dask workers through "
         "Prefect's Dask task runner: local:N (a "
         "LocalCluster of N processes) or a scheduler address tcp://host:8786; the workers must "
         "share the artifact root (and, to ingest, see the source files)")]
Nproc = Annotated[int, typer.Option(
    min=1, help="data-parallel processes on this machine (relaunches under torchrun: gloo on CPU, "
                "nccl on GPUs); for several machines run torchrun yourself")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="also write the results as JSON here")]


_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except RealmError as e:
        # the message names user files and values verbatim: never read as Rich markup
        console.print(Text.assemble(("error:", "bold red"), f" {e}"), soft_wrap=True)
        raise typer.Exit(2) from None
    except OSError as e:
        if e.errno not in _ENVIRONMENT_ERRNOS:
            raise
        # the machine, not the input or the code: a full disk, a read-only or forbidden folder
        where = e.filename or "a file this command writes"
        console.print(Text.assemble(("error:", "bold red"), f" {where}: {e.strerror}; "
                                    "nothing partial was published"), soft_wrap=True)
        raise typer.Exit(2) from None


def is_main_rank() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


class _StderrNow(logging.Handler):
    """Writes to whatever sys.stderr is when a record comes (a test runner may swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr, flush=True)


def _plain_log() -> logging.Logger:
    log = logging.getLogger("realm.progress")
    if not log.handlers:
        handler = _StderrNow()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def _progress() -> Any:
    """A rich bar on a terminal; a line a minute (count, rate, time left) when stderr is a file
    or a pipe (`nohup`, CI, `make ... > log`), where a bar would print nothing for hours."""
    from realm_core.progress import LogProgress, NoProgress

    if not is_main_rank():
        return NoProgress()
    return RichProgress() if console.is_terminal else LogProgress(_plain_log(), every=60)


def resolver(preset: str, config: Path | None, overrides: list[str] | None, root: str | None,
             force: Iterable[str] = (), dask: str | None = None) -> Resolver:
    """The stage graph over the config (preset + YAML + overrides) and the artifact root, each
    stage called in this process with a progress bar (`dask`: the stages that fan out run their
    units on Dask workers through Prefect); `force` names the stages to recompute."""
    from realm_core.config import load_config, work_dir
    from realm_core.graph.resolver import Hook, Resolver, call_directly
    from realm_core.store.artifacts import ArtifactStore

    cfg = load_config(preset, config, overrides or [])
    hook: Hook = call_directly
    if dask:
        from flows.fanout import dask_hook

        hook = dask_hook(dask, call_directly)
    return Resolver(cfg, ArtifactStore(root or work_dir() / "artifacts"), hook=hook, force=force,
                    progress=_progress)


def report(title: str, run: StageRun) -> None:
    """The stage's artifact, cache state and stats as a table (rank 0 only)."""
    if not is_main_rank():
        return
    table = Table(title=f"{title}{' (cached)' if run.cached else ''}", show_header=False)
    table.add_row("artifact", run.ref.path if run.ref else "none (off in this config)")
    if run.ref is not None:
        table.add_row("content hash", run.ref.content_hash[:16])
    for k, v in run.stats.items():
        table.add_row(k, json.dumps(v) if isinstance(v, dict) else str(v))
    out.print(table)


def peak_rss_gb() -> dict[str, float]:
    """Peak resident memory in GB of this process and of its largest finished child (a stage's
    worker processes), as the kernel counts it (`getrusage`; Linux reports KiB)."""
    import resource

    def gb(who: int) -> float:
        return round(resource.getrusage(who).ru_maxrss / 2**20, 2)

    return {"process": gb(resource.RUSAGE_SELF), "largest_child": gb(resource.RUSAGE_CHILDREN)}


def write_output(path: Path, lines: Iterable[str], option: str = "--out") -> None:
    """Write `lines` to a user's output file whole or not at all: its folder made with its
    parents, a temp file beside it renamed over it at the end; an OS error (a full disk, a
    directory in the way, no permission) a RealmError naming the option and the path."""
    import tempfile

    if path.is_dir():
        raise RealmError(f"{option} {path}: expected a file to write, found a directory")
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise RealmError(f"{option} {path}: cannot write it ({e.strerror or type(e).__name__}); "
                         "nothing was written") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def write_json(path: Path | None, payload: dict[str, Any], option: str = "--json") -> None:
    if path is not None:
        write_output(path, [json.dumps(payload, indent=2)], option)


def relaunch_under_torchrun(nproc: int) -> None:
    """With --nproc N > 1 outside torchrun: run this same command line once per rank (without
    --nproc, which torchrun would read as its own option); torchrun sets WORLD_SIZE, so the ranks
    do not relaunch again."""
    if nproc <= 1 or "WORLD_SIZE" in os.environ:
        return
    args, skip = [], False
    for arg in sys.argv[1:]:
        if skip or arg == "--nproc" or arg.startswith("--nproc="):
            skip = arg == "--nproc"
            continue
        args.append(arg)
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                              f"--nproc-per-node={nproc}", "-m", "flows.cli", *args])


def close_process_group(device: str) -> None:
    """Leave torchrun's process group at the end of a data-parallel command."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from realm_core.distributed import Placement

        Placement.from_env(device).close()
