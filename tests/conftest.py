"""Shared fixtures. Environment is set before Prefect is imported anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_SESSION_TMP = Path(tempfile.mkdtemp(prefix="realm-tests-"))
os.environ.setdefault("PREFECT_HOME", str(_SESSION_TMP / "prefect"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist each worker (and every process it starts) computes on one thread, so the
# workers share the cores rather than oversubscribing them.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)

import pytest

from realm_core.config import PipelineConfig, data_dir, load_config
from realm_core.store.artifacts import ArtifactRef, ArtifactStore

GENSIM = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
TABLES = "wikipedia/enwiki-table-markup.xml.bz2"
W2V = "wikipedia/wikipedia2vec-enwiki-pages-articles-sample.xml.bz2"
SQUAD = "squad/squad-v1.1-dev.articles-00-39.json"
DPR = "dpr/haystack-dpr-nq-dev-sample.json"

# The files whose tests take minutes, longest first (measured on 2 cores, one thread a worker:
# 8.5, 3.5, 3.4, 3.3 and 3 minutes). Under pytest-xdist (`make test`: two workers, a file to one
# worker) they start first, so that no worker is left running one of them alone at the end.
LONGEST_FIRST = ("tests/e2e/test_mechanism.py", "tests/e2e/test_gpu_run.py", "tests/e2e/test_reader_copy.py",
                 "tests/e2e/test_server.py", "tests/e2e/test_cli.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, the rest in collection order (with `--no-loadscope-reorder`,
    xdist hands files out in this order). A renamed file in LONGEST_FIRST is a usage error, not
    an order silently lost."""
    missing = [path for path in LONGEST_FIRST if not (config.rootpath / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: LONGEST_FIRST names no such file: {', '.join(missing)}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (REALM_DATA_DIR); tests that need it skip, saying why, when it is absent."""
    d = data_dir()
    if not (d / GENSIM).is_file():
        pytest.skip(f"real data not found at {d} (set REALM_DATA_DIR to the shared data folder)")
    return d


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture(scope="session")
def prefect_harness():  # type: ignore[no-untyped-def]
    """One Prefect test harness (temporary database and API) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer, 32-wide random BERT with the bundled vocabulary, saved as a local HF directory."""
    import torch
    from transformers import BertConfig, BertModel

    from realm_core.bert import load_tokenizer
    from realm_core.config import BUNDLED_ENCODER

    directory = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    tok = load_tokenizer(BUNDLED_ENCODER)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    BertModel(config).save_pretrained(str(directory), safe_serialization=True)
    tok.save_pretrained(str(directory))
    return str(directory)


TinyUpstream = tuple[Path, PipelineConfig, dict[str, ArtifactRef]]
"""The `tiny_upstream` root, the tiny preset and the refs of its blocks, spans and ICT artifacts."""


@pytest.fixture(scope="session")
def tiny_upstream(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> TinyUpstream:
    """Documents, blocks, salient spans and the ICT warm start of the tiny preset, in a root that
    the tests copy before writing into it (pretraining's settings do not change these keys)."""
    from realm_core.blocks import run_chunk
    from realm_core.ingest.stage import run_ingest
    from realm_core.retrieval.warm_start import run_warm_start_ict
    from realm_core.spans.mining import run_mine_spans

    cfg = load_config("tiny")
    root = tmp_path_factory.mktemp("tiny-upstream") / "art"
    store = ArtifactStore(root)
    blocks = run_chunk(store, run_ingest(store, cfg.ingest).ref, cfg.chunk)
    spans = run_mine_spans(store, blocks.ref, cfg.spans)
    ict = run_warm_start_ict(store, blocks.ref, spans.ref, cfg.ict)
    return root, cfg, {"blocks": blocks.ref, "spans": spans.ref, "ict": ict.ref}


def one_artifact(root: Path, kind: str) -> Path:
    """The one published artifact of `kind` under the store `root` (a manifest in its directory);
    fails if there is none or more than one."""
    found = [p for p in (root / kind).iterdir() if (p / "manifest.json").is_file()]
    assert len(found) == 1, f"{root / kind}: expected one published {kind}, found {len(found)}"
    return found[0]


# 4 steps of 4 examples, 2 micro-batches a step (so DDP's no_sync path runs), sync refresh every
# 2 steps (rank 0 rebuilds the index, both ranks switch to it), no dropout
PRETRAIN_SETTINGS = ["pretrain.batch_size=4", "pretrain.grad_accumulation=2", "pretrain.steps=4",
                     "pretrain.refresh_every=2", "pretrain.sync_refresh=true", "pretrain.dropout=0.0"]


def realm_pretrain(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`realm pretrain --preset tiny` with PRETRAIN_SETTINGS into `root`, one thread a process
    (as each of torchrun's ranks), so that runs on one and on two processes can be compared."""
    sets = [a for s in PRETRAIN_SETTINGS for a in ("--set", s)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "flows.cli", "pretrain", "--preset", "tiny", "--root",
                           str(root), *sets, *extra], capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="session")
def tiny_pretrained(tiny_upstream: TinyUpstream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted single-process REALM pretraining run (PRETRAIN_SETTINGS) in a copy of
    the tiny upstream, computed once a session: the run that test_pretrain reads and that the
    distributed tests resume and fine-tune against. Tests copy it before writing into it."""
    root = tmp_path_factory.mktemp("tiny-pretrained") / "art"
    shutil.copytree(tiny_upstream[0], root)
    run = realm_pretrain(root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root
