"""Where a training or embedding run puts its tensors, and how ranks of a data-parallel run agree.

A `Placement` is one process's share of a run: its device (CPU, or the GPU of its local rank),
its precision (fp32, or bf16 autocast where the device computes bf16 natively; int8 dynamic
quantization for an inference-only pass on a CPU) and, under `torchrun`, its
rank in a `torch.distributed` process group (gloo on CPU, nccl on GPU). A single process is
simply rank 0 of a world of one, so the training loops have one code path.

Data parallelism follows REALM's own setup (§4.2: the batch split across TPU cores, a separate
job re-embedding the corpus): every rank draws the same global batch from (seed, step), keeps
its slice `picks[rank::world]`, and DistributedDataParallel averages the gradients; rank 0
writes checkpoints and artifacts and runs the index refresh, the other ranks read them from the
shared artifact root.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import torch
from torch.nn.parallel import DistributedDataParallel

from realm_core.errors import ArtifactError, ConfigError, RealmError
from realm_core.store.artifacts import StageResult
from realm_core.store.cache import CachedStage

Precision = Literal["fp32", "bf16", "auto", "int8"]
ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 matrices in hardware: a CUDA device that supports bf16, or a
    CPU with AVX512-BF16 or AMX (x86) or oneDNN's bf16 path (other architectures). Elsewhere bf16
    autocast is emulated and slower than fp32."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    if hasattr(torch.cpu, "_is_avx512_bf16_supported"):  # x86 builds
        if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
            return True
    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
        return False  # AVX512 without BF16 would be emulated
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_precision(device: torch.device, spec: str) -> Literal["fp32", "bf16", "int8"]:
    """`auto`: bf16 autocast where `device` computes bf16 natively (`native_bf16`), else fp32.
    `fp32` and `bf16` are taken as asked; `int8` (inference only: `Placement.for_inference`) runs
    on a CPU."""
    if spec == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if spec == "int8" and device.type != "cpu":
        raise ConfigError(f"precision 'int8' on {device}: int8 dynamic quantization runs on the CPU; "
                          "expected fp32, bf16 or auto there")
    if spec not in ("fp32", "bf16", "int8"):
        raise ConfigError(f"precision {spec!r}: expected fp32, bf16, auto or int8")
    return cast(Literal["fp32", "bf16", "int8"], spec)


def quantize_int8(model: ModuleT) -> ModuleT:
    """A copy of `model` whose transformer body runs int8 dynamic quantization: every linear
    layer inside a Hugging Face model (attention projections and feed-forward: almost all of an
    encoder's multiply-adds) with int8 weights, activations quantized per batch as they arrive,
    sums in int32 (FBGEMM's AVX2/AVX-512 kernels, oneDNN's VNNI). The heads around it (a
    retriever's projection, the span scorer, which reads its weights directly) stay fp32, as do
    embeddings, layer norms and the softmax. For inference only: it has no gradient."""
    import warnings

    from transformers import PreTrainedModel

    body = {f"{name}.{sub}" if name else sub
            for name, module in model.named_modules() if isinstance(module, PreTrainedModel)
            for sub, layer in module.named_modules() if sub and isinstance(layer, torch.nn.Linear)}
    if not body:
        raise ConfigError(f"precision 'int8': {type(model).__name__} holds no transformer to quantize")
    spec = dict.fromkeys(body, torch.ao.quantization.default_dynamic_qconfig)
    with warnings.catch_warnings():  # torch.ao.quantization points to torchao; the API still works
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            model.eval(), spec, dtype=torch.qint8)
    return cast(ModuleT, quantized)


def resolve_device(spec: str) -> torch.device:
    """`auto`: the local rank's GPU where CUDA is available, else the CPU."""
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        return torch.device("cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {spec!r}: CUDA is not available on this machine (use 'auto' or 'cpu')")
    return device


def module_device(module: torch.nn.Module) -> torch.device:
    """The device a module's weights are on (the CPU for a module without any): where its inputs go."""
    return next((w.device for w in module.parameters()), torch.device("cpu"))


def attention_kernels(device: torch.device, cudnn: bool = False) -> contextlib.AbstractContextManager[Any]:
    """The fused attention kernels a forward on `device` may use. On CUDA, cuDNN's is left out
    unless asked for: PyTorch prefers it on Hopper, and profiled on an H200 its calls spent
    several times their kernel time on the host at this project's shapes, which left the GPU
    idle most of a REALM step. Flash and memory-efficient
    attention compute the same softmax(QK^T)V; elsewhere this changes nothing."""
    if device.type != "cuda" or cudnn:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


@dataclass(frozen=True)
class Placement:
    device: torch.device
    precision: Precision = "fp32"
    rank: int = 0
    world_size: int = 1
    cudnn_attention: bool = False  # see attention_kernels; True only to measure against it

    def __post_init__(self) -> None:
        # `auto` is resolved once, here, so `precision` always says what the forwards run in
        object.__setattr__(self, "precision", resolve_precision(self.device, self.precision))

    @classmethod
    def single(cls) -> Placement:
        return cls(torch.device("cpu"))

    @classmethod
    def from_env(cls, device: str = "auto", precision: Precision = "fp32") -> Placement:
        """This process's placement; joins the process group when launched by torchrun."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        resolved = resolve_device(device)
        if world > 1 and not torch.distributed.is_initialized():
            if resolved.type == "cuda":
                torch.cuda.set_device(resolved)
            torch.distributed.init_process_group("nccl" if resolved.type == "cuda" else "gloo")
        rank = torch.distributed.get_rank() if world > 1 else 0
        return cls(resolved, precision, rank, world)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """The context a model's forward runs in: bf16 autocast for matrix products where asked
        (weights and optimizer stay fp32) and the attention kernels of `attention_kernels`."""
        with contextlib.ExitStack() as stack:
            if self.precision == "bf16":
                stack.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16))
            stack.enter_context(attention_kernels(self.device, self.cudnn_attention))
            yield

    def for_inference(self, model: ModuleT) -> ModuleT:
        """`model` as an inference-only pass runs it here: in eval mode, and int8-quantized
        (`quantize_int8`, a copy) where the precision is int8."""
        model.eval()
        return quantize_int8(model) if self.precision == "int8" else model

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's slice of a global batch: items[rank::world]."""
        return list(items[self.rank::self.world_size])

    def close(self) -> None:
        """Leave the process group (at the end of a torchrun job)."""
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    @property
    def comm_device(self) -> torch.device:
        """Where collectives run: the GPU with nccl, the CPU with gloo."""
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of `values` over the ranks (float64)."""
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.comm_device)
        torch.distributed.all_reduce(t)
        return [float(v) for v in t.cpu()]

    def broadcast_int(self, value: int) -> int:
        """Rank 0's `value` on every rank."""
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.comm_device)
        torch.distributed.broadcast(t, src=0)
        return int(t.item())

    def sum_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Add up every rank's gradients in place, in one flat all-reduce. A parameter that
        has a gradient on some rank gets zeros where it has none; one with a gradient on no rank
        keeps None (so AdamW still skips it, as in one process)."""
        if not self.distributed or not parameters:
            return
        device = self.comm_device
        has = torch.tensor([p.grad is not None for p in parameters], dtype=torch.int32, device=device)
        torch.distributed.all_reduce(has)
        live = [p for p, n in zip(parameters, has.tolist(), strict=True) if n > 0]
        if not live:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in live]
        flat = torch.cat([g.reshape(-1).to(device) for g in grads])
        torch.distributed.all_reduce(flat)
        offset = 0
        for p in live:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.device).clone()
            offset += n

    def data_parallel(self, module: ModuleT) -> ModuleT | DistributedDataParallel:
        """`module` wrapped in DistributedDataParallel (gradients averaged over ranks), or itself."""
        if not self.distributed:
            return module
        ids = [self.device.index] if self.device.type == "cuda" else None
        # BERT's buffers (position ids) are constants: no need to broadcast them every forward
        return DistributedDataParallel(module, device_ids=ids, broadcast_buffers=False)


@contextlib.contextmanager
def gradient_sync(modules: Sequence[torch.nn.Module], sync: bool) -> Iterator[None]:
    """Within a step's micro-batches, only the last backward averages gradients over ranks."""
    with contextlib.ExitStack() as stack:
        if not sync:
            from torch.nn.parallel import DistributedDataParallel

            for m in modules:
                if isinstance(m, DistributedDataParallel):
                    stack.enter_context(m.no_sync())
        yield


@contextlib.contextmanager
def rank_zero_first(placement: Placement) -> Iterator[None]:
    """Rank 0 runs the block first (building cached upstream artifacts); the others then run it
    and find them in the cache."""
    if not placement.is_main:
        placement.barrier()
    yield
    if placement.is_main:
        placement.barrier()


def rank_zero_artifact(placement: Placement, cache: CachedStage) -> StageResult:
    """On a rank other than 0: wait for rank 0 to publish the stage's artifact, and return it."""
    placement.barrier()
    try:
        return cache.result()
    except ArtifactError:
        raise RealmError(f"rank {placement.rank}: rank 0 did not publish {cache.kind}/{cache.key}") from None


def unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module a DistributedDataParallel wrapper holds, or the module itself."""
    inner = getattr(module, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else module
