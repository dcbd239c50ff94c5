"""Placement on one process: the single-rank defaults the training loops rely on."""

import numpy as np
import pytest
import torch

from realm_core import distributed
from realm_core.distributed import (
    Placement,
    gradient_sync,
    module_device,
    rank_zero_first,
    resolve_device,
    resolve_precision,
    unwrap,
)
from realm_core.errors import ConfigError


def test_a_single_process_is_rank_zero_of_a_world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    place = Placement.from_env("cpu")
    assert (place.rank, place.world_size, place.is_main, place.distributed) == (0, 1, True, False)
    assert place.shard([10, 11, 12]) == [10, 11, 12]
    assert place.sum([1.5, 2.0]) == [1.5, 2.0] and place.broadcast_int(7) == 7
    module = torch.nn.Linear(2, 2)
    assert place.data_parallel(module) is module and unwrap(module) is module
    with rank_zero_first(place), gradient_sync([module], sync=False):
        pass


def test_ranks_take_interleaved_slices_of_the_global_batch() -> None:
    batch = list(range(7))
    slices = [Placement(torch.device("cpu"), rank=r, world_size=3).shard(batch) for r in range(3)]
    assert slices == [[0, 3, 6], [1, 4], [2, 5]]


def test_devices_resolve_or_are_refused() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda")


def test_compute_leaves_cudnn_attention_out_on_cuda_only_unless_asked() -> None:
    """The flags `sdpa_kernel` sets are process state, readable without a GPU."""
    cuda = torch.device("cuda")
    before = torch.backends.cuda.cudnn_sdp_enabled()
    assert before, "PyTorch enables cuDNN attention by default"
    with Placement(cuda, "fp32").compute():
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with Placement(cuda, "fp32", cudnn_attention=True).compute(), Placement.single().compute():
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_compute_autocasts_matrix_products_to_bf16_only_when_asked() -> None:
    a = torch.ones(2, 2)
    with Placement(torch.device("cpu"), "bf16").compute():
        assert (a @ a).dtype == torch.bfloat16
    with Placement.single().compute():
        assert (a @ a).dtype == torch.float32


def test_auto_precision_is_bf16_only_where_the_device_computes_it_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    for native, want in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(distributed, "native_bf16", lambda device, native=native: native)
        assert resolve_precision(cpu, "auto") == want
        assert Placement(cpu, "auto").precision == want  # resolved once, at construction
        assert Placement.from_env("cpu", "auto").precision == want
        for asked in ("fp32", "bf16"):  # an explicit precision is taken as asked
            assert resolve_precision(cpu, asked) == Placement(cpu, asked).precision == asked
    with pytest.raises(ConfigError, match="fp16"):
        resolve_precision(cpu, "fp16")


def test_native_bf16_follows_the_cpus_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(torch.cpu, "_is_avx512_bf16_supported"):
        pytest.skip("this torch build has no x86 CPU capability queries")
    monkeypatch.setattr(distributed.platform, "machine", lambda: "x86_64")
    for bf16, amx, want in ((True, False, True), (False, True, True), (False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda bf16=bf16: bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx)
        assert distributed.native_bf16(torch.device("cpu")) is want
    assert distributed.native_bf16(torch.device("meta")) is False


def test_int8_is_an_inference_copy_on_the_cpu_close_to_fp32() -> None:
    from realm_core.bert import load_tokenizer
    from realm_core.config import BUNDLED_ENCODER
    from realm_core.retrieval.embed import embed_texts
    from realm_core.retrieval.encoders import RetrieverEncoder

    cpu = torch.device("cpu")
    assert resolve_precision(cpu, "int8") == Placement(cpu, "int8").precision == "int8"
    with pytest.raises(ConfigError, match="int8 dynamic quantization runs on the CPU"):
        resolve_precision(torch.device("cuda"), "int8")
    with Placement(cpu, "int8").compute():  # no autocast: the quantized layers carry the precision
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    encoder = RetrieverEncoder.from_pretrained(BUNDLED_ENCODER, 128, "cls", 0, False)
    quantized = Placement(cpu, "int8").for_inference(encoder)
    assert quantized is not encoder and any(type(m) is torch.nn.Linear for m in encoder.modules())  # a copy
    assert Placement(cpu, "fp32").for_inference(encoder) is encoder
    # every linear layer of the transformer body quantized; the projection head stays fp32
    body = [type(m) for name, m in quantized.named_modules() if "layer." in name and type(m).__name__ == "Linear"]
    assert len(body) == 6 * 6 and set(body) == {torch.ao.nn.quantized.dynamic.Linear}, body
    heads = [n for n, m in quantized.named_modules() if type(m) is torch.nn.Linear]
    assert heads and not any("layer." in n for n in heads), heads
    tokenizer = load_tokenizer(BUNDLED_ENCODER)
    titles = ["Paris", "Nile", "Jupiter", "Mozart"]
    texts = ["Paris is the capital of France.", "The Nile flows north into the Mediterranean Sea.",
             "Jupiter is the largest planet of the Solar System.", "Mozart composed The Magic Flute in 1791."]
    fp32 = embed_texts(encoder, tokenizer, titles, texts, 64, 4)
    int8 = embed_texts(encoder, tokenizer, titles, texts, 64, 4, precision="int8")
    assert np.array_equal(fp32, embed_texts(encoder, tokenizer, titles, texts, 64, 4))  # the original untouched
    cosine = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert cosine.min() > 0.9, cosine
    assert not np.array_equal(fp32, int8)  # int8 really ran
    # each block still nearest to its own fp32 vector
    assert ((int8 @ fp32.T).argmax(1) == np.arange(4)).all()


def test_an_int8_span_reader_scores_spans_as_fp32_does() -> None:
    from realm_core.config import BUNDLED_ENCODER
    from realm_core.openqa.span_reader import SpanReader

    reader = SpanReader.from_pretrained(BUNDLED_ENCODER, 3, seed=0).eval()
    quantized = Placement(torch.device("cpu"), "int8").for_inference(reader)
    assert isinstance(quantized.scorer.mlp[0], torch.nn.Linear)  # the scorer reads its weights: fp32
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 5000, (2, 3, 24), generator=g)  # (B, K, T)
    mask, body = torch.ones_like(ids), torch.zeros(2, 3, 24, dtype=torch.bool)
    body[:, :, 8:] = True
    with torch.inference_mode():
        fp32, int8 = reader(ids, mask, body), quantized(ids, mask, body)  # (B, K, T, L)
    finite = torch.isfinite(fp32)
    assert torch.equal(finite, torch.isfinite(int8)) and not torch.equal(fp32[finite], int8[finite])
    assert torch.corrcoef(torch.stack([fp32[finite], int8[finite]]))[0, 1] > 0.9


def test_int8_is_an_option_of_inference_stages_only() -> None:
    from pydantic import ValidationError

    from realm_core.config import load_config

    cfg = load_config("tiny")
    eval_hash = cfg.openqa_eval.config_hash()
    # an option added after keys were published: unset, it is left out of the hash
    assert "precision" not in cfg.openqa_eval.model_dump(exclude=cfg.openqa_eval.hash_exclude())  # type: ignore[arg-type]
    int8 = load_config("tiny", overrides=["embed.precision=int8", "openqa_eval.precision=int8", "query.precision=int8"])
    assert int8.openqa_eval.config_hash() != eval_hash and int8.embed.config_hash() != cfg.embed.config_hash()
    for training in ("ict.precision=int8", "pretrain.precision=int8", "finetune.precision=int8", "precision=int8"):
        with pytest.raises((ValidationError, ConfigError)):
            load_config("tiny", overrides=[training])


def test_a_modules_device_is_its_weights_and_the_cpu_without_any() -> None:
    assert module_device(torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")
    assert module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert module_device(torch.nn.ReLU()) == torch.device("cpu")  # no weights: inputs stay on the host
