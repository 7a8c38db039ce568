"""Placement never changes a result, whatever the file's offsets.

A CPU kernel may sum in another order when its weight's address is not aligned (a one-row fp32
``F.linear`` on AVX-512 does), so a resident layer computing with the file's memory-mapped view
and a streamed layer computing with a fresh copy used to disagree in the last bit. The rule
(``core/ops/alignment.py``): a copy on its source's device keeps the source's address modulo 64.

The files here put every tensor off a 64-byte boundary on purpose (``write_at_odd_offsets``: a
4-byte residue for fp32, 2 for fp16/bf16), so the tests do not depend on the CPU showing the
difference: besides comparing outputs they record the address residue of every weight and bias an
op layer computes with, and require the same record in every placement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from core.loading.loader import load_checkpoint
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.ops import layers as ops
from core.ops.alignment import ALIGNMENT, copy_for_compute, copy_keeping_alignment, residue
from core.ops.layers import CastWeights
from core.ops.streaming import patch_fn_from, stream_layers
from core.patching.lora_stack import LoraStack
from core.session.testrun import RunConfig, perform_test_run
from tests.fixtures.st_files import write_at_odd_offsets
from tests.fixtures.tiny_models import checkpoint_tensors

#: dtype -> the residue its file puts the data area at (the element size decides what is possible)
DTYPES = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}
DT_IDS = ["fp32", "fp16", "bf16"]


# -- the copy rule -----------------------------------------------------------------------------


def _at(values: torch.Tensor, res: int) -> torch.Tensor:
    """``values`` stored at address residue ``res`` (mod 64) inside a larger buffer."""
    nbytes = values.numel() * values.element_size()
    buf = torch.zeros(nbytes + 2 * ALIGNMENT, dtype=torch.uint8)
    start = (res - buf.data_ptr()) % ALIGNMENT
    out = buf[start : start + nbytes].view(values.dtype).view(values.shape)
    out.copy_(values)
    assert residue(out) == res
    return out


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.int64, torch.uint8]
)
def test_a_copy_keeps_its_source_address_modulo_64(dtype: torch.dtype) -> None:
    values = torch.randn(7, 33).to(dtype) if dtype != torch.int64 else torch.arange(231).view(7, 33)
    size = values.element_size()
    for res in range(0, ALIGNMENT, size):
        src = _at(values, res)
        for copy in (copy_keeping_alignment(src), copy_for_compute(src, torch.device("cpu"))):
            assert residue(copy) == res and copy.is_contiguous() and copy.shape == src.shape
            assert copy.untyped_storage().data_ptr() != src.untyped_storage().data_ptr()  # fresh
            assert torch.equal(copy.view(torch.uint8), src.view(torch.uint8))
            assert copy.untyped_storage().nbytes() < src.nbytes + 2 * ALIGNMENT  # < 64 B extra + base


def test_empty_and_strided_sources_get_plain_copies() -> None:
    empty = torch.empty(0, 4)
    assert copy_keeping_alignment(empty).shape == (0, 4)
    strided = torch.randn(8, 6).t()
    copy = copy_keeping_alignment(strided)
    assert copy.is_contiguous() and torch.equal(copy, strided)


def _ramp(*shape: int) -> torch.Tensor:
    return torch.linspace(-1, 1, int(torch.Size(shape).numel())).view(shape)


KERNELS: dict[str, tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]] = {
    "linear_1_row": ((96, 320), lambda w: F.linear(_ramp(1, 320).to(w.dtype), w)),
    "linear_77_rows": ((96, 320), lambda w: F.linear(_ramp(77, 320).to(w.dtype), w)),
    "conv2d": ((16, 8, 3, 3), lambda w: F.conv2d(_ramp(1, 8, 10, 10).to(w.dtype), w)),
}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", list(DTYPES), ids=DT_IDS)
def test_a_kernel_gives_the_same_bits_for_a_copy_at_the_same_residue(kernel: str, dtype: torch.dtype) -> None:
    """The premise of the rule: what a kernel computes is a function of the values and the address
    residue. Every residue is tried (on some CPUs some of them give bits an aligned weight does not:
    that is allowed, a copy at another residue than its source is not)."""
    shape, fn = KERNELS[kernel]
    values = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    for res in range(0, ALIGNMENT, values.element_size()):
        src = _at(values, res)
        assert torch.equal(fn(copy_keeping_alignment(src)), fn(src)), f"residue {res}"


def test_streamed_copies_keep_the_residue_of_what_they_stream() -> None:
    layer = ops.Linear(320, 96)
    layer.weight = nn.Parameter(_at(torch.randn(96, 320), 12), requires_grad=False)
    layer.bias = nn.Parameter(_at(torch.randn(96), 36), requires_grad=False)
    x = torch.randn(1, 320)
    resident = layer(x)
    net = nn.Sequential(layer)
    stream_layers(net, ["0"], "cpu")
    assert layer.stream is not None
    staged = layer.stream.copy_to(torch.device("cpu"), None)
    assert (residue(staged.weight), residue(staged.bias)) == (12, 36)  # type: ignore[arg-type]
    assert torch.equal(net(x), resident)


# -- whole placements of a real tiny SD1.5 UNet --------------------------------------------------


@dataclass(frozen=True)
class Files:
    ckpt: Path
    lora: Path
    size: int  # bytes of the UNet's weights


def _lora(unet: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    out = {}
    for k, v in unet.items():  # attention projections, a 1x1 conv and a time-embedding linear
        if k.endswith(("attn2.to_k.weight", "attn1.to_q.weight", "proj_in.weight", "time_embed.2.weight")):
            name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
            rest = v.shape[2:]
            down = torch.randn(2, v.shape[1], *rest, generator=g) * 0.3
            up = torch.randn(v.shape[0], 2, *[1] * len(rest), generator=g) * 0.3
            out[f"{name}.lora_down.weight"], out[f"{name}.lora_up.weight"] = down.to(dtype), up.to(dtype)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[torch.dtype, Files]:
    d = tmp_path_factory.mktemp("align")
    torch.manual_seed(0)
    out = {}
    for dtype, res in DTYPES.items():
        tiny = checkpoint_tensors("sd1")
        tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tiny.items()}
        ckpt = d / f"tiny-{res}-{str(dtype)[6:]}.safetensors"
        residues = write_at_odd_offsets(ckpt, tensors, residue=res)
        assert all(r % 64 for r in residues.values())  # every tensor off a 64-byte boundary
        unet = load_checkpoint(ckpt).diffusion_model.module.state_dict()
        lora = d / f"lora-{str(dtype)[6:]}.safetensors"
        write_at_odd_offsets(lora, _lora(unet, dtype), residue=res)
        out[dtype] = Files(ckpt, lora, sum(t.nbytes for t in unet.values()))
    return out


@contextmanager
def computing_weights(model: nn.Module) -> Iterator[list[tuple[str, str, int, int | None]]]:
    """Records (layer, device, weight residue, bias residue) of what every op layer computes with."""
    names = {id(m): n for n, m in model.named_modules()}
    trace: list[tuple[str, str, int, int | None]] = []
    original = CastWeights.cast_weight_bias

    def recorded(self: CastWeights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        w, b = original(self, x)
        trace.append((names.get(id(self), "?"), str(w.device), residue(w), None if b is None else residue(b)))
        return w, b

    CastWeights.cast_weight_bias = recorded  # type: ignore[method-assign]
    try:
        yield trace
    finally:
        CastWeights.cast_weight_bias = original  # type: ignore[method-assign]


Outcome = tuple[dict[str, object], list[tuple[str, str, int, int | None]]]


def _run(model: nn.Module, dtype: torch.dtype, before_step: Callable[[], None] | None = None) -> Outcome:
    # batch 1: the time embedding's linears see one row, the case a misaligned weight changes
    cfg = RunConfig(steps=2, width=64, height=64, seed=5, dtype=dtype)
    with computing_weights(model) as trace:
        summary = perform_test_run(model, cfg, before_step=before_step).output_summary()
    return summary, trace


def _file_or_baked(f: Files, dtype: torch.dtype, lora: bool) -> Outcome:
    bundle = load_checkpoint(f.ckpt)
    if lora:
        stack = LoraStack(bundle.components)
        stack.add(f.lora, 0.8)
        stack.apply()  # baked on the CPU, no manager: patched weights are fresh, the rest file views
    return _run(bundle.diffusion_model.module, dtype)


def _placed(
    f: Files, dtype: torch.dtype, lora: bool, free: int, state: str, unload_to: int | None
) -> Outcome:
    bundle = load_checkpoint(f.ckpt)
    stack = LoraStack(bundle.components)
    if lora:
        stack.add(f.lora, 0.8)
    patcher = stack.patchers["diffusion_model"]
    mover = TorchMover()
    mover.use_patcher(patcher)
    budget = {"free": free}
    settings = PlanSettings(vram_state=state, reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: budget["free"], mover, settings=settings, device="cpu")
    manager.register(patcher, "unet")
    manager.load_models([patcher]).raise_if_refused()
    if unload_to is not None:  # another program took memory: part of the model leaves the device
        budget["free"] = unload_to
        manager.free_memory(0, keep=())
        assert any(e.kind == "partial_unload" for e in manager.events.events())
        return _run(bundle.diffusion_model.module, dtype)  # run as the unload left it
    place = lambda: manager.load_models([patcher]).raise_if_refused()  # noqa: E731
    return _run(bundle.diffusion_model.module, dtype, place)


PLACEMENTS = ["resident", "partial", "streamed", "partial_unload"]


def _placement(name: str, f: Files, dtype: torch.dtype, lora: bool) -> Outcome:
    size = f.size
    if name == "resident":
        return _placed(f, dtype, lora, size * 4, "normal", None)
    if name == "partial":
        return _placed(f, dtype, lora, int(size * 0.4), "normal", None)
    if name == "streamed":
        return _placed(f, dtype, lora, size // 5, "no_vram", None)
    return _placed(f, dtype, lora, int(size * 0.7), "normal", -int(size * 0.2))


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=DT_IDS)
def test_every_placement_computes_with_the_same_addresses_and_bits(
    files: dict[torch.dtype, Files], dtype: torch.dtype, lora: bool
) -> None:
    f = files[dtype]
    reference, ref_trace = _file_or_baked(f, dtype, lora)
    # the condition is provoked: almost every weight computes from a view off a 64-byte boundary
    # (LoRA-patched weights are fresh tensors in every placement)
    off_line = sum(1 for _, _, w, _ in ref_trace if w)
    assert off_line > 0.8 * len(ref_trace), (off_line, len(ref_trace))
    assert all(dev == "cpu" for _, dev, _, _ in ref_trace)
    for name in PLACEMENTS:
        summary, trace = _placement(name, f, dtype, lora)
        assert trace == ref_trace, f"{name}: a layer computed with a weight at another address residue"
        assert summary == reference, f"{name}: other bits than the file's own placement"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES), ids=DT_IDS)
def test_cuda_resident_and_streamed_compute_with_aligned_device_tensors(
    files: dict[torch.dtype, Files], dtype: torch.dtype
) -> None:
    """On CUDA every computing weight is a fresh device block (resident copy, streamed copy from the
    mapping or from a pinned staging buffer alike), so the file's offsets never reach a kernel."""
    f = files[dtype]
    runs = [
        _cuda_run(f, dtype, free, state)
        for free, state in ((4.0, "normal"), (0.4, "normal"), (0.2, "no_vram"))
    ]
    assert runs[0] == runs[1] == runs[2]


def _cuda_run(f: Files, dtype: torch.dtype, fraction: float, state: str) -> Outcome:
    bundle = load_checkpoint(f.ckpt)
    stack = LoraStack(bundle.components)
    stack.add(f.lora, 0.8)
    patcher = stack.patchers["diffusion_model"]
    mover = TorchMover(pin=True)
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state=state, reserve_bytes=0, min_inference_bytes=0)
    free = int(f.size * fraction)
    manager = MemoryManager(lambda: free, mover, settings=settings, device="cuda")
    manager.register(patcher, "unet")
    model = bundle.diffusion_model.module
    cfg = RunConfig(steps=2, width=64, height=64, seed=5, dtype=dtype, device="cuda")
    with computing_weights(model) as trace:
        place = lambda: manager.load_models([patcher]).raise_if_refused()  # noqa: E731
        summary = perform_test_run(model, cfg, before_step=place).output_summary()
    assert trace and all(dev.startswith("cuda") and w == 0 and b in (0, None) for _, dev, w, b in trace)
    return summary, trace


def test_fp8_weights_with_a_lora_give_the_same_bits_streamed_or_baked() -> None:
    """Another placement-dependent path, found while fixing alignment: a streamed fp8 layer applies
    its LoRA in the compute dtype (so a small LoRA is not rounded away); a baked or resident one
    used to round the patched weight back to fp8. Now every placement patches the upcast weight
    (``core.quant.fp8_weight``), so the bits agree."""
    from core.patching.adapters.lora import LoRAAdapter
    from core.patching.patcher import KeyPatch, ModelPatcher

    g = torch.Generator().manual_seed(0)
    weight = torch.randn(32, 64, generator=g).to(torch.float8_e4m3fn)
    up, down = torch.randn(32, 2, generator=g) * 0.01, torch.randn(2, 64, generator=g) * 0.01
    x = torch.randn(3, 64, generator=g)
    outs = []
    for streamed in (False, True):
        net = nn.Sequential(ops.Linear(64, 32, bias=False))
        net[0].weight = nn.Parameter(weight.clone(), requires_grad=False)
        patcher = ModelPatcher(net)
        patcher.add_patches("lora", {"0.weight": (KeyPatch(LoRAAdapter(up, down)),)})
        if streamed:
            stream_layers(net, ["0"], "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
        else:
            patcher.apply()
        outs.append(net(x))
    assert torch.equal(outs[0], outs[1])
