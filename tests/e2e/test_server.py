"""The user's path with a real self-hosted Prefect server: `make serve`, run realm/full-pipeline
(from the session's tiny upstream: ingest to ICT are cache hits), rerun one stage from its
deployment (a cache hit), `make stop`. Loopback only."""

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TinyUpstream

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_data: Path,
           tiny_upstream: TinyUpstream) -> Iterator[dict[str, str]]:
    work = tmp_path_factory.mktemp("serve-work")
    # ingest to ICT are the session's (the same keys): the deployment finds them in its cache
    # and computes the rest; the stage flows compute them in tests/flows
    shutil.copytree(tiny_upstream[0], work / "artifacts")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(REALM_WORK_DIR=str(work), REALM_DATA_DIR=str(shared_data),
               PREFECT_WORKER_QUERY_SECONDS="2", PREFECT_WORKER_PREFETCH_SECONDS="2")
    start = subprocess.run(["bash", "flows/serve.sh", "start", str(port)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert start.returncode == 0, start.stdout + start.stderr
    env.update(PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
               PREFECT_HOME=str(work / "prefect-server"))
    try:
        yield env | {"work": str(work)}
    finally:
        subprocess.run(["bash", "flows/serve.sh", "stop"], cwd=ROOT, env=env, timeout=60)


def prefect(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in env.items() if k != "work"}
    return subprocess.run([PREFECT, *args], cwd=ROOT, env=clean, capture_output=True, text=True,
                          timeout=timeout)


def run_deployment(env: dict[str, str], name: str) -> str:
    r = prefect(env, "deployment", "run", name, "-p", "preset=tiny", "--watch",
                "--watch-interval", "2", "--watch-timeout", "900", timeout=960)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Completed" in r.stdout, r.stdout
    return r.stdout


def test_deployments_listed(server: dict[str, str]) -> None:
    r = prefect(server, "deployment", "ls")
    assert r.returncode == 0
    for name in ("realm/full-pipeline", "ingest-corpus/realm", "chunk-blocks/realm",
                 "mine-salient-spans/realm", "warm-start-ict/realm", "warm-start-retromae/realm",
                 "evaluate-retrieval/realm", "pretrain-realm/realm", "finetune-openqa/realm", "evaluate-openqa/realm",
                 "refresh-index/refresh-index", "grow-knowledge/grow-knowledge"):
        assert name in r.stdout, r.stdout


def test_nightly_refresh_is_scheduled(server: dict[str, str]) -> None:
    r = prefect(server, "deployment", "inspect", "refresh-index/refresh-index")
    assert r.returncode == 0 and "0 3 * * *" in r.stdout, r.stdout
    r = prefect(server, "deployment", "inspect", "grow-knowledge/grow-knowledge")
    assert r.returncode == 0 and "30 3 * * *" in r.stdout, r.stdout


def test_full_pipeline_then_a_cached_stage_rerun(server: dict[str, str]) -> None:
    run_deployment(server, "realm/full-pipeline")
    artifacts = Path(server["work"]) / "artifacts"
    # the pipeline's index is built with the ICT document encoder (tiny: 4 ICT steps)
    assert json.loads((artifacts / "index" / "CURRENT").read_text())["step"] == 4
    for kind in ("documents", "blocks", "salient_spans", "retriever", "retrieval_eval", "realm_model",
                 "questions", "openqa_eval"):
        found = list((artifacts / kind).glob("*/manifest.json"))
        assert len(found) == 1, kind
    # Table 1: BM25, ICT and REALM fine-tuned with one budget; all four systems evaluated
    assert len(list((artifacts / "openqa_model").glob("*/manifest.json"))) == 3
    qa = json.loads(next((artifacts / "openqa_eval").glob("*/manifest.json")).read_text())
    assert set(qa["results"]["squad-open"]["systems"]) == {"gold paragraph reader", "no retrieval",
                                                           "BM25 + reader", "ICT (ORQA-like)", "REALM"}
    report = json.loads(next((artifacts / "blocks").glob("*/manifest.json")).read_text())
    assert report["rows"]["blocks"] == 612
    # one progress line for the whole run, in the run's artifacts, and each computed stage's time
    # kept for the next run's estimate
    r = prefect(server, "artifact", "inspect", "realm-pipeline-progress")
    assert r.returncode == 0 and "100" in r.stdout and "stages, " in r.stdout and ", done" in r.stdout, r.stdout
    reports = Path(server["work"]) / "reports"
    seconds = json.loads((reports / "stage-seconds-tiny.json").read_text())
    table = next(reports.glob("pipeline-tiny-*.md")).read_text().split("\n\n## ")[0]
    computed = {cells[1].strip() for line in table.splitlines()
                if len(cells := line.split("|")) > 3 and cells[2].strip() == "computed"}
    assert "pretrain" in computed and set(seconds) == computed, (seconds, table)
    # one stage graph: every CLI command on the same preset finds the flows' artifacts (same keys)
    from typer.testing import CliRunner

    from flows.cli import app

    for command in (["ingest"], ["chunk"], ["mine-spans"], ["warm-start"], ["refresh-index"],
                    ["evaluate-retrieval"], ["pretrain"], ["questions"], ["finetune"], ["evaluate"]):
        r = CliRunner().invoke(app, [*command, "--preset", "tiny", "--root", str(artifacts)],
                               env={"COLUMNS": "200"})
        assert r.exit_code == 0, (command, r.output)
        assert "(cached)" in r.output, (command, r.output)
    run_deployment(server, "chunk-blocks/realm")
    # the rerun published no new artifact, and its stage report says cache hit
    assert len(list((artifacts / "blocks").glob("*/manifest.json"))) == 1
    r = prefect(server, "artifact", "inspect", "chunk")
    assert r.returncode == 0 and "cache hit" in r.stdout, r.stdout
    # the nightly deployment re-embeds with the newest retriever (REALM model: 4 ICT + 4 pretraining
    # steps) and switches the index to it
    run_deployment(server, "refresh-index/refresh-index")
    assert json.loads((artifacts / "index" / "CURRENT").read_text())["step"] == 8


def test_stop_leaves_no_process_running(server: dict[str, str]) -> None:
    """`make stop` ends the server, the worker and every process they started (the worker once
    outlived it, polling a server that was gone), and says what it stopped."""
    import psutil

    state = Path(server["work"]) / "serve"
    family: list[psutil.Process] = []
    for name in ("server", "worker"):
        leader = psutil.Process(int((state / f"{name}.pid").read_text()))
        family += [leader, *leader.children(recursive=True)]
    assert len(family) >= 2
    clean = {k: v for k, v in server.items() if k != "work"}
    stop = subprocess.run(["bash", "flows/serve.sh", "stop"], cwd=ROOT, env=clean, capture_output=True,
                          text=True, timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "stopped worker" in stop.stdout and "stopped server" in stop.stdout, stop.stdout

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    survivors = [f"{p.pid}" for p in family if running(p)]
    assert not survivors, f"still running after make stop: {survivors}"
    assert not (state / "worker.pid").exists() and not (state / "server.pid").exists()
