"""The fused block-wise LoRA bake: ComfyUI's per-key math, bit for bit, whatever the blocks."""

from __future__ import annotations

import pytest
import torch

from core.patching.adapters import DiffAdapter, LoConAdapter, LoRAAdapter, Patch, apply_patches, fused
from core.patching.adapters.fused import bake_lora_stack, fusable


def _lora(
    out: int, inp: int, rank: int, seed: int, *, kernel: int = 0, alpha: float | None = None
) -> LoRAAdapter:
    g = torch.Generator().manual_seed(seed)
    up = torch.randn(out, rank, *((1, 1) if kernel else ()), generator=g) * 0.05
    down = torch.randn(rank, inp, *((kernel, kernel) if kernel else ()), generator=g) * 0.05
    cls = LoConAdapter if kernel else LoRAAdapter
    return cls(up.half(), down.half(), alpha=alpha, module=f"m{seed}")


def _comfy(weight: torch.Tensor, patches: list[Patch]) -> torch.Tensor:
    """ComfyUI's per-key bake, written out whole-weight: float32 copy, per LoRA
    ``W += (strength * alpha / rank) * (up @ down)``, one cast back."""
    work = weight.to(torch.float32, copy=True)
    flat = work.view(work.shape[0], -1)
    for p in patches:
        a = p.adapter
        assert isinstance(a, LoRAAdapter)
        down = a.down.float().flatten(1)
        if a.mid is not None:
            down = torch.einsum("ij...,jc->ic...", a.mid.float(), down).flatten(1)
        product = torch.mm(a.up.float().flatten(1), down)
        rows = flat if p.offset is None else flat.narrow(0, p.offset[1], p.offset[2])
        rows += (p.strength * a.scale) * product
    return work.to(weight.dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("block_bytes", [1, 7 * 48 * 4, 1 << 21])  # one row a block, 7 rows (ragged), all
def test_matches_the_whole_weight_math_bit_for_bit(
    dtype: torch.dtype, block_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fused, "BLOCK_BYTES", block_bytes)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(45, 48, generator=g).to(dtype)
    before = weight.clone()
    patches = [
        Patch(_lora(45, 48, 4, 1, alpha=3.0), 0.8),
        Patch(_lora(20, 48, 2, 2), -1.7, (0, 9, 20)),  # a slice that crosses block edges
        Patch(_lora(45, 48, 8, 3, alpha=1.0), 0.0),  # strength 0: a no-op
        Patch(_lora(45, 48, 4, 4, alpha=0.5), 2.3),  # a second LoRA on the same rows, after the first
    ]
    assert fusable(weight, patches)
    out = apply_patches(weight, patches)
    assert out.dtype == dtype and out.shape == weight.shape
    assert torch.equal(_bits(out), _bits(_comfy(weight, patches)))
    assert torch.equal(_bits(weight), _bits(before))  # the input is never written


@pytest.mark.parametrize("block_bytes", [1, 5 * 32 * 9 * 4, 1 << 21])
def test_conv_locon_and_tucker_mid(block_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused, "BLOCK_BYTES", block_bytes)
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(16, 32, 3, 3, generator=g).half()
    tucker = LoConAdapter(
        (torch.randn(16, 4, 1, 1, generator=g) * 0.1).half(),
        (torch.randn(4, 32, 1, 1, generator=g) * 0.1).half(),
        (torch.randn(4, 4, 3, 3, generator=g) * 0.1).half(),
        alpha=2.0,
        module="tucker",
    )
    patches = [Patch(_lora(16, 32, 4, 5, kernel=3, alpha=4.0), 0.6), Patch(tucker, -0.9)]
    out = apply_patches(weight, patches)
    assert out.shape == weight.shape
    assert torch.equal(_bits(out), _bits(_comfy(weight, patches)))


def test_one_row_weight_and_non_contiguous_input() -> None:
    g = torch.Generator().manual_seed(2)
    row = torch.randn(1, 40, generator=g).half()
    patch = [Patch(_lora(1, 40, 2, 6), 1.1)]
    assert torch.equal(_bits(apply_patches(row, patch)), _bits(_comfy(row, patch)))
    base = torch.randn(30, 24, generator=g).half()
    transposed = base.t().contiguous().t()  # same values, column-major storage
    patch = [Patch(_lora(30, 24, 3, 7), 0.7)]
    assert torch.equal(_bits(apply_patches(transposed, patch)), _bits(apply_patches(base, patch)))


def test_all_zero_strengths_give_an_unchanged_copy() -> None:
    weight = torch.randn(6, 5).half()
    out = bake_lora_stack(weight, [Patch(_lora(6, 5, 2, 8), 0.0)], torch.float32)
    assert torch.equal(out, weight) and out is not weight


def test_other_devices_take_the_whole_weight_path() -> None:
    weight = torch.empty(12, 8, dtype=torch.float16, device="meta")
    out = bake_lora_stack(weight, [Patch(_lora(12, 8, 2, 9), 0.5)], torch.float32)
    assert out.is_meta and out.dtype == torch.float16 and out.shape == (12, 8)


def test_what_is_not_fused() -> None:
    weight = torch.zeros(8, 6)
    lora = _lora(8, 6, 2, 10)
    assert not fusable(weight, [Patch(DiffAdapter(torch.zeros(8, 6), module="d"), 1.0), Patch(lora, 1.0)])
    dora = LoRAAdapter(lora.up, lora.down, dora_scale=torch.ones(8, 1), module="dora")
    assert not fusable(weight, [Patch(dora, 1.0)])
    assert not fusable(weight, [Patch(_lora(8, 3, 2, 11), 1.0, (1, 0, 3))])  # a slice of columns
    assert fusable(weight, [Patch(_lora(4, 6, 2, 12), 1.0, (-2, 4, 4))])  # rows, counted from the end
    assert not fusable(weight, [])


def test_a_bake_after_one_made_under_inference_mode_still_works() -> None:
    """The block buffers are kept per thread: made first while a streamed layer was patched during a
    run (inference mode), they must still be writable by a bake outside it."""
    import core.patching.adapters.fused as fused

    fused._local.__dict__.clear()
    with torch.inference_mode():
        first = fused._buffer(16, torch.float32)
    assert not first.is_inference()
    fused._buffer(16, torch.float32).fill_(1.0)  # outside inference mode
