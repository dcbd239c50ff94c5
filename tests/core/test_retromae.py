from pathlib import Path

import pytest
import torch

from realm_core.bert import load_tokenizer
from realm_core.config import BUNDLED_ENCODER, RetroMAEConfig, load_config
from realm_core.retrieval.encoders import RetrieverEncoder
from realm_core.retrieval.retromae import (
    RetroMAE,
    RetroMAEPoint,
    encoder_mask,
    enhanced_attention_mask,
    retromae_batch,
    train_retromae,
)
from realm_core.store.artifacts import ArtifactStore


def test_enhanced_mask_never_self_always_the_embedding_and_the_configured_rate() -> None:
    valid = torch.ones(16, 40, dtype=torch.bool)
    valid[3, 25:] = False  # a padded row
    rate = 0.5
    allowed = enhanced_attention_mask(valid, rate, torch.Generator().manual_seed(0))  # (B, T, T)
    assert allowed.shape == (16, 40, 40)
    assert allowed[:, :, 0].all(), "every position sees the sentence embedding"
    diagonal = allowed[:, torch.arange(1, 40), torch.arange(1, 40)]
    assert not diagonal.any(), "no position attends to itself"
    assert not allowed[3, :, 25:].any(), "padding is never visible"
    eligible = valid[:, None, :].expand(-1, 40, -1).clone()
    eligible[:, :, 0] = False
    eligible &= ~torch.eye(40, dtype=torch.bool)[None]
    hidden_share = 1 - allowed[eligible].float().mean().item()
    assert hidden_share == pytest.approx(rate, abs=0.02)
    rows_differ = (allowed[0, 1] != allowed[0, 2]).any()
    assert rows_differ, "each row samples its own context"
    lower = enhanced_attention_mask(valid, 0.7, torch.Generator().manual_seed(0))
    assert 1 - lower[eligible].float().mean().item() == pytest.approx(0.7, abs=0.02)


def test_encoder_mask_rate_skips_special_tokens_and_mostly_uses_mask() -> None:
    tok = load_tokenizer(BUNDLED_ENCODER)
    batch = retromae_batch(["word " * 60] * 32, ["Title"] * 32, tok, 64)
    masked, chosen = encoder_mask(batch["input_ids"], batch["special"], 0.3, tok, torch.Generator().manual_seed(1))
    assert not chosen[batch["special"]].any()
    assert chosen[~batch["special"]].float().mean().item() == pytest.approx(0.3, abs=0.03)
    assert torch.equal(masked[~chosen], batch["input_ids"][~chosen])
    share_mask = (masked[chosen] == tok.mask_token_id).float().mean().item()
    assert share_mask == pytest.approx(0.8, abs=0.05)


@pytest.mark.parametrize("enhanced", [True, False])
def test_both_decoders_give_finite_losses_and_gradients_reach_the_embedding(tiny_bert: str, enhanced: bool) -> None:
    tok = load_tokenizer(tiny_bert)
    model = RetroMAE.from_pretrained(tiny_bert, dropout=0.0)
    batch = retromae_batch(["Ada Lovelace wrote the first program.", "Paris is in France."],
                           ["Ada", "Paris"], tok, 32)
    cfg = RetroMAEConfig(encoder=tiny_bert, enhanced_decoding=enhanced)
    losses = model(batch["input_ids"], batch["attention_mask"], batch["special"], tok, cfg,
                   torch.Generator().manual_seed(0))
    assert all(torch.isfinite(v) for v in losses.values())
    torch.autograd.grad(losses["decoder_loss"], model.masked_lm.bert.encoder.layer[-1].output.dense.weight)


def _train(tmp_path: Path, tiny_bert: str, steps: int, kill_at: int | None = None) -> tuple[RetroMAE, list[RetroMAEPoint]]:
    class Killed(Exception):
        pass

    texts = [f"{a} was born in {b} and later moved to {c}." for a, b, c in
             [("Ada", "London", "Paris"), ("Alan", "Maida Vale", "Manchester"), ("Grace", "New York", "Virginia")]]
    cfg = RetroMAEConfig(encoder=tiny_bert, batch_size=2, block_length=32, steps=steps, learning_rate=1e-3,
                         dropout=0.1, checkpoint_every=2, log_every=1)
    torch.manual_seed(0)
    model = RetroMAE.from_pretrained(tiny_bert, dropout=0.1)

    def kill(point: RetroMAEPoint) -> None:
        if point.step == kill_at:
            raise Killed

    try:
        curve = train_retromae(model, ["T"] * 3, texts, load_tokenizer(tiny_bert), cfg, tmp_path / "ckpt", on_log=kill)
    except Killed:
        return model, []
    return model, curve


def test_a_resumed_run_ends_with_the_parameters_of_an_uninterrupted_one(tmp_path: Path, tiny_bert: str) -> None:
    full, curve_full = _train(tmp_path / "full", tiny_bert, 4)
    _, killed = _train(tmp_path / "resumed", tiny_bert, 4, kill_at=3)  # dies after step 2's checkpoint
    assert killed == []
    resumed, curve_res = _train(tmp_path / "resumed", tiny_bert, 4)
    assert [p.step for p in curve_res] == [1, 2, 3, 4]
    assert [p.loss for p in curve_res] == pytest.approx([p.loss for p in curve_full], abs=1e-6)
    for (name, x), y in zip(full.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=0, msg=name)


def test_a_placement_sets_the_forwards_precision_and_the_weights_stay_fp32(tmp_path: Path, tiny_bert: str) -> None:
    """`retromae.device` and `retromae.precision`: the masks come from the CPU generator on any
    device, and the forward runs in the placement's autocast; on the CPU the bf16 path's first
    loss is close to fp32's but not equal, and the weights stay fp32."""
    import math

    from realm_core.distributed import Placement

    texts = [f"{a} was born in {b} and later moved to {c}." for a, b, c in
             [("Ada", "London", "Paris"), ("Alan", "Maida Vale", "Manchester"), ("Grace", "New York", "Virginia")]]
    cfg = RetroMAEConfig(encoder=tiny_bert, batch_size=3, block_length=32, steps=2, learning_rate=1e-3,
                         dropout=0.0, checkpoint_every=5, log_every=1)
    losses = {}
    for precision in ("fp32", "bf16"):
        model = RetroMAE.from_pretrained(tiny_bert, dropout=0.0)
        curve = train_retromae(model, ["T"] * 3, texts, load_tokenizer(tiny_bert), cfg, tmp_path / precision,
                               placement=Placement(torch.device("cpu"), precision))  # type: ignore[arg-type]
        losses[precision] = [p.loss for p in curve]
        assert all(math.isfinite(x) for x in losses[precision])
        assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert losses["bf16"][0] == pytest.approx(losses["fp32"][0], rel=0.02) and losses["bf16"][0] != losses["fp32"][0]
    assert RetroMAEConfig().device == "auto" and "device" in RetroMAEConfig.EXECUTION_FIELDS


def test_loss_falls_on_real_blocks_and_the_retriever_loads(shared_data: Path, tmp_path: Path) -> None:
    from realm_core.blocks import run_chunk
    from realm_core.ingest.stage import run_ingest
    from realm_core.retrieval.warm_start import doc_encoder_dir, run_warm_start_retromae

    cfg = load_config("tiny", overrides=["retromae.steps=24", "retromae.batch_size=8",
                                         "retromae.learning_rate=5e-4", "retromae.checkpoint_every=50"])
    store = ArtifactStore(tmp_path / "art")
    blocks = run_chunk(store, run_ingest(store, cfg.ingest).ref, cfg.chunk).ref
    result = run_warm_start_retromae(store, blocks, cfg.retromae)
    curve = store.open(result.ref).read_table("retromae_curve").to_pylist()
    first = sum(r["decoder_loss"] for r in curve[:4]) / 4
    last = sum(r["decoder_loss"] for r in curve[-4:]) / 4
    assert last < first - 0.5, (first, last)
    assert result.stats["final_loss"] < result.stats["first_loss"]
    encoder = RetrieverEncoder.from_pretrained(doc_encoder_dir(result.ref))
    assert encoder.projection_dim == 384 and encoder.step == 24 and encoder.pooling == "cls"
    assert run_warm_start_retromae(store, blocks, cfg.retromae).cached
