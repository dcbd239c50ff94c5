"""REALM pretraining on the tiny preset: refresh and held-out scoring, the null-only baseline, bad
warm starts."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from realm_core.bert import resolve_encoder_dir
from realm_core.config import BUNDLED_ENCODER, PipelineConfig
from realm_core.errors import ArtifactError, ConfigError
from realm_core.pretrain.stage import run_pretrain
from realm_core.retrieval.versions import versions
from realm_core.store.artifacts import ArtifactRef, ArtifactStore
from tests.conftest import TinyUpstream, one_artifact

pytestmark = pytest.mark.slow


def _copy(upstream: TinyUpstream, dest: Path) -> tuple[ArtifactStore, dict[str, ArtifactRef]]:
    """A copy of the shared upstream root (tests/conftest.py) that one test may write into."""
    root, _, refs = upstream
    shutil.copytree(root, dest)
    moved = {k: ArtifactRef(r.kind, r.path.replace(str(root), str(dest)), r.content_hash) for k, r in refs.items()}
    return ArtifactStore(dest), moved


def _pretrain(store: ArtifactStore, refs: dict[str, ArtifactRef], cfg: PipelineConfig, progress=None,  # type: ignore[no-untyped-def]
              chunk_encoder=None, **over):
    p = cfg.pretrain.model_copy(update=over)
    return run_pretrain(store, refs["blocks"], refs["spans"], refs["ict"] if p.warm_start != "none" else None,
                        p, cfg.masking, cfg.embed, cfg.index, progress, chunk_encoder=chunk_encoder)


def test_a_run_refreshes_its_index_and_scores_every_held_out_span(tiny_pretrained: Path) -> None:
    """The session's uninterrupted run (`realm pretrain`, tests/conftest.py). A killed run's
    resume to the same losses, weights and held-out rows is tests/e2e/test_distributed.py's
    (killed on one process, resumed on two)."""
    store = ArtifactStore(tiny_pretrained)
    model = one_artifact(tiny_pretrained, "realm_model")
    run = store.open(str(model), kind="realm_model")
    stats = run.manifest["stats"]
    metrics = run.read_table("pretrain_metrics").to_pylist()
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    # tiny: ICT ends at retriever step 4, pretraining refreshes at its step 2 -> index v6 (sync)
    assert [r["index_step"] for r in metrics] == [4, 4, 6, 6]
    run_dir = next((tiny_pretrained / "runs").iterdir())
    assert versions(ArtifactStore(run_dir)) == [4, 6]
    assert stats["heldout_examples"] > 0 and stats["refreshes_skipped"] == 0
    # the held-out test per example, as the last eval scored it; its accuracy is the eval
    # curve's last point
    rows = run.read_table("pretrain_heldout").to_pylist()
    assert 0 < len(rows) == stats["heldout_examples"] <= run.manifest["config"]["eval_examples"]
    assert [r["example"] for r in rows] == list(range(len(rows)))
    accuracy = sum(r["correct"] for r in rows) / len(rows)
    assert accuracy == pytest.approx(run.read_table("pretrain_eval").to_pylist()[-1]["span_accuracy"])
    assert stats["recoverable_examples"] == sum(r["recoverable"] for r in rows)
    # a span found in a retrieved block is recoverable (retrieved blocks are never trivial ones)
    found = [r for r in rows if r["answer_retrieved"]]
    assert all(r["recoverable"] for r in found)
    assert stats["heldout_answer_retrieved"] == pytest.approx(len(found) / len(rows), abs=1e-4)
    # p(z|x) on blocks that hold the span: none where none is retrieved, at most all of it where one is
    assert 0.0 <= stats["heldout_p_holder"] <= stats["heldout_answer_retrieved"]
    assert all(0.0 <= r["p_holder"] <= r["answer_retrieved"] for r in metrics)
    # the reader's masked-LM warm-up ran first (`realm pretrain` resolves it as a stage of its
    # own, so pretraining finds it in the cache), never on held-out articles' blocks
    warm = stats["reader_mlm"]
    assert warm["steps"] == 2 and warm["heldout_blocks"] > 0
    assert Path(warm["artifact"]).parent == tiny_pretrained / "reader_mlm"
    assert run.manifest["report"].startswith("### Reader masked-LM warm-up")  # its curve shows in the stage report


def test_null_only_baseline_never_retrieves(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    _, cfg, _ = tiny_upstream
    store, refs = _copy(tiny_upstream, tmp_path / "c")
    result = _pretrain(store, refs, cfg, retrieval="null_only", steps=2)
    metrics = store.open(result.ref).read_table("pretrain_metrics").to_pylist()
    assert {r["p_null"] for r in metrics} == {1.0}
    assert {r["retrieval_utility"] for r in metrics} == {0.0}
    assert {r["answer_retrieved"] for r in metrics} == {r["p_holder"] for r in metrics} == {0.0}
    assert not any(r["answer_retrieved"] for r in store.open(result.ref).read_table("pretrain_heldout").to_pylist())
    assert not (tmp_path / "c" / "runs").exists() or not list((tmp_path / "c" / "runs").glob("*/index/v*"))


def test_a_warm_start_with_another_vocabulary_is_refused_before_training(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    _, cfg, _ = tiny_upstream
    store, refs = _copy(tiny_upstream, tmp_path / "d")
    vocab = Path(refs["ict"].path) / "query_encoder" / "vocab.txt"
    vocab.write_text(vocab.read_text() + "zzzextraword\n")
    (Path(refs["ict"].path) / "query_encoder" / "tokenizer.json").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="query_encoder: warm-start encoder has another tokenizer"):
        _pretrain(store, refs, cfg)
    assert not (tmp_path / "d" / "checkpoints").exists() or not list((tmp_path / "d" / "checkpoints").iterdir())


def test_blocks_whose_tokenizer_moved_are_read_through_chunk_encoder(tiny_upstream: TinyUpstream, tmp_path: Path) -> None:
    """The masking re-reads the blocks' wordpieces with the tokenizer that cut them: the config's
    `chunk.encoder` first, then the reader's, then the path the blocks record. Here that path is
    gone and the reader's tokenizer files differ (same vocabulary): refused before any step,
    naming what was tried, and trained once `chunk.encoder` says where the tokenizer is."""
    _, cfg, _ = tiny_upstream
    store, refs = _copy(tiny_upstream, tmp_path / "e")
    manifest = Path(refs["blocks"].path) / "manifest.json"
    m = json.loads(manifest.read_text())
    m["tokenizer"]["encoder"] = str(tmp_path / "gone")
    manifest.write_text(json.dumps(m))
    reader = tmp_path / "reader"
    shutil.copytree(resolve_encoder_dir(BUNDLED_ENCODER), reader)
    spec = json.loads((reader / "tokenizer_config.json").read_text())
    (reader / "tokenizer_config.json").write_text(json.dumps({**spec, "model_max_length": 4096}))
    with pytest.raises(ArtifactError, match=re.escape(f"tried pretrain.reader_encoder {str(reader)!r}; the path "
                                                      f"the blocks record {str(tmp_path / 'gone')!r}")):
        _pretrain(store, refs, cfg, retrieval="null_only", steps=2, reader_encoder=str(reader))
    assert not (tmp_path / "e" / "realm_model").exists()
    result = _pretrain(store, refs, cfg, retrieval="null_only", steps=2, reader_encoder=str(reader),
                       chunk_encoder=BUNDLED_ENCODER)
    assert result.stats["train_examples"] > 0 and not result.cached


def test_a_frozen_first_phase_keeps_the_warm_start_and_skips_its_refreshes(tiny_upstream: TinyUpstream,
                                                                            tmp_path: Path) -> None:
    """`pretrain.retriever_frozen_steps`: no gradient into either encoder for the first steps and
    no refresh while they hold (the index is what they were embedded into); the encoders train
    after. Frozen for the whole run, the saved encoders are the warm start's, weight for weight;
    frozen for the first 2 of 4 steps, the refresh at step 2 (tiny: every 2) is skipped and the
    encoders move (unfrozen, the same run refreshes at step 2: the first test here)."""
    from safetensors.torch import load_file

    _, cfg, _ = tiny_upstream
    store, refs = _copy(tiny_upstream, tmp_path / "f")
    warm = {n: load_file(str(Path(refs["ict"].path) / n / "model.safetensors"))
            for n in ("query_encoder", "doc_encoder")}

    def saved(result) -> dict[str, dict]:  # type: ignore[no-untyped-def,type-arg]
        return {n: load_file(str(Path(result.ref.path) / n / "model.safetensors")) for n in warm}

    def moved(a: dict, b: dict) -> bool:  # type: ignore[type-arg]
        return any(not torch.equal(a[k], b[k]) for k in a)

    frozen = _pretrain(store, refs, cfg, retriever_frozen_steps=4)
    assert not any(moved(warm[n], saved(frozen)[n]) for n in warm)
    metrics = store.open(frozen.ref).read_table("pretrain_metrics").to_pylist()
    assert [r["index_step"] for r in metrics] == [4, 4, 4, 4]  # never refreshed
    assert frozen.stats["utility_below_zero_steps"] is None  # no collapse is watched while frozen
    half = _pretrain(store, refs, cfg, retriever_frozen_steps=2)
    metrics = store.open(half.ref).read_table("pretrain_metrics").to_pylist()
    assert [r["index_step"] for r in metrics] == [4, 4, 4, 4]  # step 2's refresh skipped, the next is past the run
    assert all(moved(warm[n], saved(half)[n]) for n in warm)



def test_the_reading_experiment_measures_every_trained_reader(
        tiny_pretrained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/realm_reading.py over the session's REALM run: the null-only run is not in
    the cache, so its reader is left out; each reader is read once on every recoverable example;
    REALM's encoders are measured against ICT's on the span-holding block's rank."""
    import sys

    import lab
    import realm_reading

    from tests.conftest import PRETRAIN_SETTINGS

    root = tmp_path / "art"
    shutil.copytree(tiny_pretrained, root)
    monkeypatch.setattr(lab, "RESULTS", tmp_path / "bench" / "results")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    monkeypatch.setenv("REALM_WORK_DIR", str(tmp_path / "work"))
    sets = [a for s in PRETRAIN_SETTINGS for a in ("--set", s)]
    monkeypatch.setattr(sys, "argv", ["realm_reading.py", "--preset", "tiny", "--root", str(root), *sets,
                                      "--eval-examples", "4", "--name", "t"])
    import realm_core.pretrain.reading as reading

    reads: list[int] = []
    read_blocks = reading.read_blocks
    monkeypatch.setattr(reading, "read_blocks", lambda *a, **k: reads.append(1) or read_blocks(*a, **k))
    realm_reading.main()
    result = json.loads((tmp_path / "bench" / "results" / "t.json").read_text())
    assert list(result["readers"]) == ["warm-up reader", "REALM reader"]
    assert len(reads) == 2  # each reader once
    run = ArtifactStore(root).open(str(one_artifact(root, "realm_model")), kind="realm_model")
    rows = run.read_table("pretrain_heldout").to_pylist()
    assert result["heldout_examples"] == len(rows) and result["recoverable"] == sum(r["recoverable"] for r in rows)
    for m in result["readers"].values():
        assert 0 <= m["null_block_accuracy"] <= 1 and 0 <= m["oracle_block_accuracy"] <= 1
    assert set(result["marginal"]) == {"warm-up reader"}
    assert all(m["examples"] == min(4, len(rows)) for m in result["marginal"].values())
    # the REALM run's encoders trained: the span-holding block's rank under them, paired with ICT's
    top = result["top_k"] - 1
    retrieval = result["retrieval"]["REALM"]
    assert retrieval["trained_from_step"] >= 1 and retrieval["steps"] == 4
    assert retrieval[f"within_top_{top}"]["start"] == result["oracle_rank"][f"within_top_{top}"]
    assert retrieval["median_rank"]["start"] == result["oracle_rank"]["median"]
    assert 0 <= retrieval[f"within_top_{top}"]["end"] <= 1 and retrieval["rank_rose"] + retrieval["rank_fell"] <= 1
    # its learning curve as the run recorded it: every step in one window (4 < 50), every evaluation
    curve, metrics = retrieval["curve"], run.read_table("pretrain_metrics").to_pylist()
    assert [(w["first_step"], w["last_step"]) for w in curve["training"]] == [(1, 4)]
    assert curve["training"][0]["p_null"] == pytest.approx(sum(r["p_null"] for r in metrics) / len(metrics))
    assert [e["step"] for e in curve["heldout"]] == run.read_table("pretrain_eval").column("step").to_pylist()
