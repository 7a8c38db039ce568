"""Next-DiT (Lumina 2 and Z-Image) against diffusers' ``Lumina2Transformer2DModel`` and
``ZImageTransformer2DModel`` (test-only references).

At the released widths (3840 / 2304: heads, kv groups, rotary axes and MLP widths as released)
with one joint block and no refiners, and at a small width of the same forms with two blocks and
two refiners of each kind: random diffusers weights, converted with our key maps, identical inputs,
fp32. Files: the same weights in the original (ComfyUI) and diffusers layouts go through detection
and the public loader. Full size: the released shapes, on the meta device, against diffusers'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.nextdit.keys import lumina2_key_map, z_image_key_map
from core.files.writer import write_safetensors
from core.loading.convert.dit_diffusers import convert_shapes
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.nextdit import NextDiT, NextDiTConfig
from tests.core.generate.reference_nextdit import (
    lumina2_reference,
    lumina2_velocity,
    ours_from,
    z_image_reference,
    z_image_velocity,
)
from tests.fixtures.diffusion_layouts_dit import lumina2 as lumina2_layout
from tests.fixtures.diffusion_layouts_dit import z_image as z_image_layout

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
def test_z_image_at_its_released_width_matches_diffusers() -> None:
    """3840 wide, 30 heads of 128, axes (32, 48, 48), theta 256, MLP 10240, Qwen3-4B's 2560-wide
    features; 5 x 6 patches (30 image tokens: 2 pad tokens) and 32 caption tokens (no pads: where
    the caption needs pads ComfyUI and diffusers place them differently, see the network)."""
    hf = z_image_reference()
    ours = ours_from(hf)
    assert ours.config == NextDiTConfig(n_layers=1, n_refiner_layers=0)
    x, sigma, ctx = _inputs(1, 10, 12, 32, 2560, seed=1)
    with torch.no_grad():
        got = ours(x, sigma, ctx)
    _compare(got, z_image_velocity(hf, x, sigma, list(ctx)), "z-image 3840", 1e-5)


@pytest.mark.slow
def test_lumina2_at_its_released_width_matches_diffusers() -> None:
    """2304 wide, 24 query heads over 8 kv heads of 96, axes (32, 32, 32), theta 10000, MLP 9216,
    Gemma-2-2B's 2304-wide features; 19 caption tokens (Lumina 2 pads nothing)."""
    hf = lumina2_reference()
    ours = ours_from(hf)
    assert ours.config == NextDiTConfig.lumina2(n_layers=1, n_refiner_layers=0)
    x, sigma, ctx = _inputs(2, 8, 14, 19, 2304, seed=2)
    with torch.no_grad():
        got = ours(x, sigma, ctx)
    _compare(got, lumina2_velocity(hf, x, sigma, ctx), "lumina2 2304", 1e-5)


def _small_z() -> Any:
    return z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=48, seed=3)


def _small_lumina() -> Any:
    return lumina2_reference(dim=192, heads=2, kv_heads=1, layers=2, refiners=2, cap=40, seed=4)


@pytest.fixture(scope="module")
def small() -> dict[str, tuple[Any, NextDiT]]:
    z, lumina = _small_z(), _small_lumina()
    return {"z-image": (z, ours_from(z)), "lumina2": (lumina, ours_from(lumina))}


@pytest.mark.parametrize(("form", "size", "tokens"), [("z-image", (6, 8), 64), ("lumina2", (6, 8), 7)])
def test_refiners_and_several_blocks_match_diffusers(
    small: dict[str, tuple[Any, NextDiT]], form: str, size: tuple[int, int], tokens: int
) -> None:
    hf, ours = small[form]
    x, sigma, ctx = _inputs(2, *size, tokens, ours.config.cap_feat_dim, seed=5)
    with torch.no_grad():
        got = ours(x, sigma, ctx)
    want = (
        z_image_velocity(hf, x, sigma, list(ctx))
        if form == "z-image"
        else lumina2_velocity(hf, x, sigma, ctx)
    )
    _compare(got, want, f"{form} small", 1e-5)


def test_odd_latent_sizes_are_padded_and_cropped(small: dict[str, tuple[Any, NextDiT]]) -> None:
    _, ours = small["z-image"]
    x, sigma, ctx = _inputs(1, 7, 9, 5, 48, seed=6)
    with torch.no_grad():
        out = ours(x, sigma, ctx)
    assert out.shape == (1, 16, 7, 9) and torch.isfinite(out).all()


def test_a_context_of_the_wrong_width_is_a_clear_error(small: dict[str, tuple[Any, NextDiT]]) -> None:
    _, ours = small["z-image"]
    x, sigma, _ = _inputs(1, 4, 4, 5, 48, seed=7)
    with pytest.raises(Exception, match="text features 48 wide"):
        ours(x, sigma, torch.zeros(1, 5, 40))


@pytest.mark.parametrize("form", ["z-image", "lumina2"])
@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_a_saved_file_detects_loads_and_runs(
    tmp_path: Path, small: dict[str, tuple[Any, NextDiT]], form: str, layout: str
) -> None:
    hf, ours = small[form]
    state = dict(ours.state_dict()) if layout == "original" else dict(hf.state_dict())
    if layout == "original" and form == "lumina2":  # Lumina 2's originals keep an unused final norm
        state["norm_final.weight"] = torch.ones(ours.config.dim)
    path = write_safetensors(tmp_path / f"{form}-{layout}.safetensors", state)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", form)
    assert det.components[0].layout == layout
    loaded = load_diffusion_model(path)
    assert isinstance(loaded.module, NextDiT) and loaded.family == form
    x, sigma, ctx = _inputs(1, 6, 6, 9, ours.config.cap_feat_dim, seed=8)
    with torch.no_grad():
        assert torch.equal(loaded.module(x, sigma, ctx), ours(x, sigma, ctx))


@pytest.mark.parametrize("form", ["z-image", "lumina2"])
def test_full_size_shapes_are_the_released_ones(form: str) -> None:
    """The released original layout reads as the released config; our network has exactly its
    tensors, and diffusers' full-size model converts onto them."""
    import diffusers

    layout = z_image_layout() if form == "z-image" else lumina2_layout()
    shapes = {k: tuple(v) for k, v in layout.items() if k != "norm_final.weight"}
    config = NextDiTConfig.from_shapes(shapes)
    assert config == (NextDiTConfig() if form == "z-image" else NextDiTConfig.lumina2())
    ours = NextDiT(config, device="meta")
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
    with torch.device("meta"):
        if form == "z-image":
            hf = diffusers.ZImageTransformer2DModel()
            rows = z_image_key_map(30)
        else:
            hf = diffusers.Lumina2Transformer2DModel(cap_feat_dim=2304)
            rows = lumina2_key_map(26)
    converted = convert_shapes({k: tuple(v.shape) for k, v in hf.state_dict().items()}, rows)
    assert converted == shapes
    params = sum(v.numel() for v in ours.state_dict().values())
    assert round(params / 1e9, 2) == (6.15 if form == "z-image" else 2.61)
