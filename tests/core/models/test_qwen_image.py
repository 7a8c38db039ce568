"""Qwen-Image's MMDiT against diffusers' ``QwenImageTransformer2DModel`` (test-only reference).

At the released width (3072: 24 heads of 128, MLP 12288, Qwen2.5-VL's 3584-wide text) with one
block: random diffusers weights loaded as they are (the same names), identical inputs, fp32, on an
even patch grid (on an odd one ComfyUI and diffusers place the image differently: ComfyUI's rule
is checked on its own). Files: a narrower network of the same head width (two blocks) written as
Comfy-Org's repacks are (bf16, fp8 e4m3fn), as diffusers' ``save_pretrained`` writes it and as a
ComfyUI-GGUF file goes through detection and the public loader and computes what the same weights
compute in our network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.files.writer import write_safetensors
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.patches import NetworkPatches, Site
from core.models.qwen_image import QwenImageConfig, QwenImageDiT
from core.models.qwen_image.network import positions
from tests.core.generate.reference_qwen_image import (
    ours_from,
    pack,
    qwen_image_reference,
    qwen_image_velocity,
    unpack,
)
from tests.fixtures.diffusion_layouts_dit import qwen_image as qwen_image_layout
from tests.fixtures.gguf_quant import write_comfy_gguf

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(batch: int, h: int, w: int, tokens: int, width: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, h, w, generator=gen)
    sigma = torch.tensor([0.93, 0.41][:batch])
    return x, sigma, torch.randn(batch, tokens, width, generator=gen)


def _compare(got: torch.Tensor, want: torch.Tensor, name: str, tol: float) -> None:
    err, top = float((got - want).abs().max()), float(want.abs().max())
    print(f"{name}: max |ours - diffusers| = {err:.1e} (|out| <= {top:.2f})")
    assert got.shape == want.shape
    assert top > 0.05 and err < tol * top


@pytest.mark.slow
def test_qwen_image_at_its_released_width_matches_diffusers() -> None:
    """3072 wide, one block, a 4 x 6 patch grid and 21 text tokens, batch 2 at two sigmas; the
    latent as the VAE gives it (one frame) comes back in its shape."""
    hf = qwen_image_reference(seed=1)
    ours = ours_from(hf)
    assert ours.config == QwenImageConfig(n_layers=1)
    x, sigma, ctx = _inputs(2, 8, 12, 21, 3584, seed=2)
    with torch.no_grad():
        got = ours(x, sigma, ctx)
        frames = ours(x[:, :, None], sigma, ctx)
    _compare(got, qwen_image_velocity(hf, x, sigma, ctx), "qwen-image 3072", 1e-4)
    assert torch.equal(frames[:, :, 0], got)


def test_positions_follow_comfyui_on_odd_grids() -> None:
    """Image patch (r, c) of an h x w grid at (0, r - h // 2, c - w // 2), text token i at
    max(h // 2, w // 2) + i on all three axes (diffusers puts an odd grid's rows one lower)."""
    pe = positions(3, 5, 2, torch.device("cpu"))
    assert pe.shape == (1, 1, 2 + 15, 64, 2)
    # the first axis' lowest frequency is 1 rad per position, the second axis' starts at channel 8
    angle = torch.atan2(pe[0, 0, :, :, 1], pe[0, 0, :, :, 0])
    assert torch.allclose(angle[:2, 0], torch.tensor([2.0, 3.0]), atol=1e-5)
    assert torch.allclose(angle[2:, 8].view(3, 5)[:, 0], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-5)
    assert torch.allclose(angle[2:, 36].view(3, 5)[0], torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0]), atol=1e-5)


def _small(seed: int) -> tuple[Any, QwenImageDiT]:
    hf = qwen_image_reference(dim=256, heads=2, layers=2, seed=seed)
    return hf, ours_from(hf)


@pytest.fixture(scope="module")
def small() -> tuple[Any, QwenImageDiT]:
    return _small(3)


def test_two_blocks_match_diffusers_and_block_patches_see_the_picture_tokens(
    small: tuple[Any, QwenImageDiT],
) -> None:
    hf, ours = small
    x, sigma, ctx = _inputs(1, 8, 4, 9, 3584, seed=4)
    with torch.no_grad():
        got = ours(x, sigma, ctx)
    _compare(got, qwen_image_velocity(hf, x, sigma, ctx), "qwen-image 2 blocks", 1e-5)
    seen: list[tuple[Site, tuple[int, ...]]] = []

    def record(h: torch.Tensor, site: Site) -> torch.Tensor:
        seen.append((site, tuple(h.shape)))
        return h

    with torch.no_grad():
        same = ours(x, sigma, ctx, NetworkPatches(blocks=(record,)))
    assert torch.equal(same, got)
    assert seen == [(Site("double", 0), (1, 8, 256)), (Site("double", 1), (1, 8, 256))]
    assert ours.patch_points().blocks == {"double": 2}


def test_reference_latents_are_extra_picture_tokens_as_in_qwen_image_edit(
    small: tuple[Any, QwenImageDiT],
) -> None:
    """Qwen-Image-Edit's reference pictures (ComfyUI's ``ref_latents``, ``index`` method): their
    patches follow the picture's at frame index 1, 2, ..., each centred; diffusers' transformer
    given the same tokens and ``img_shapes`` (the picture's output is its first tokens)."""
    hf, ours = small
    x, sigma, ctx = _inputs(1, 8, 4, 9, 3584, seed=9)
    gen = torch.Generator().manual_seed(10)
    refs = [torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 16, 4, 8, generator=gen)]
    with torch.no_grad():
        got = ours(x, sigma, ctx, references=refs)
        alone = ours(x, sigma, ctx)
        frames = ours(x[:, :, None], sigma, ctx, references=[r[:, :, None] for r in refs])
        tokens = torch.cat([pack(x), *(pack(r) for r in refs)], dim=1)
        shapes = [[(1, 4, 2), (1, 2, 2), (1, 2, 4)]]
        mask = torch.ones(ctx.shape[:2], dtype=torch.long)
        out = hf(tokens, ctx, mask, sigma, img_shapes=shapes, return_dict=False)[0]
    _compare(got, unpack(out[:, :8], 8, 4), "qwen-image references", 1e-5)
    assert not torch.allclose(got, alone, atol=1e-3)  # the references are attended
    assert torch.equal(frames[:, :, 0], got)


def test_bad_inputs_are_clear_errors(small: tuple[Any, QwenImageDiT]) -> None:
    _, ours = small
    x, sigma, ctx = _inputs(1, 4, 4, 5, 3584, seed=5)
    with pytest.raises(Exception, match="text features 3584 wide"):
        ours(x, sigma, torch.zeros(1, 5, 2560))
    with pytest.raises(Exception, match="one frame"):
        ours(torch.zeros(1, 16, 2, 4, 4), sigma, ctx)
    with pytest.raises(Exception, match="cannot be applied to the Qwen-Image network"):
        ours(x, sigma, ctx, NetworkPatches(joins=(lambda h, skip, site: (h, skip),)))


def test_odd_latent_sizes_are_padded_and_cropped(small: tuple[Any, QwenImageDiT]) -> None:
    _, ours = small
    x, sigma, ctx = _inputs(1, 7, 9, 5, 3584, seed=6)
    with torch.no_grad():
        out = ours(x, sigma, ctx)
    assert out.shape == (1, 16, 7, 9) and torch.isfinite(out).all()


def _write(kind: str, folder: Path, hf: Any, ours: QwenImageDiT) -> tuple[Path, QwenImageDiT]:
    """A file of ``kind`` and our network on the weights the file holds (as stored, in fp32)."""
    state = {k: v.contiguous() for k, v in ours.state_dict().items()}
    if kind == "diffusers":
        hf.save_pretrained(folder / "transformer")
        return folder / "transformer" / "diffusion_pytorch_model.safetensors", ours
    if kind == "gguf":
        path, held, _ = write_comfy_gguf(folder / "qwen-image-Q8_0.gguf", "qwen_image", state, "Q8_0")
    else:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float8_e4m3fn
        stored = {k: v.to(dtype) if v.ndim == 2 else v.to(torch.bfloat16) for k, v in state.items()}
        path = write_safetensors(folder / f"qwen_image_{kind}.safetensors", stored)
        held = stored
    twin = QwenImageDiT(ours.config, device="meta")
    twin.load_state_dict({k: v.float() for k, v in held.items()}, assign=True, strict=True)
    return path, twin.eval()


@pytest.mark.parametrize("kind", ["bf16", "fp8_e4m3fn", "diffusers", "gguf"])
def test_a_saved_file_detects_loads_and_runs(
    tmp_path: Path, small: tuple[Any, QwenImageDiT], kind: str
) -> None:
    hf, ours = small
    path, twin = _write(kind, tmp_path, hf, ours)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", "qwen-image")
    loaded = load_diffusion_model(path)
    assert isinstance(loaded.module, QwenImageDiT) and loaded.family == "qwen-image"
    assert loaded.module.config == ours.config
    x, sigma, ctx = _inputs(1, 6, 6, 9, 3584, seed=8)
    with torch.no_grad():
        got, want = loaded.module(x, sigma, ctx), twin(x, sigma, ctx)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_full_size_shapes_are_the_released_ones() -> None:
    """The released layout reads as the released config; our network has exactly its tensors
    (20.4 billion numbers)."""
    shapes = {k: tuple(v) for k, v in qwen_image_layout().items()}
    config = QwenImageConfig.from_shapes(shapes)
    assert config == QwenImageConfig()
    ours = QwenImageDiT(config, device="meta")
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
    assert round(sum(v.numel() for v in ours.state_dict().values()) / 1e9, 1) == 20.4
