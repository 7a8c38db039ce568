"""PixArt-Σ's and PixArt-α's transformer against diffusers' PixArtTransformer2DModel (a test-only
reference).

Tiny configs (16 heads, as every PixArt has 16 heads): random diffusers weights, converted with
our key map, run on identical inputs in fp32. Files: the same weights written as safetensors in the
original (ComfyUI) layout and in diffusers' layout go through detection and the public loader. Full
size: the released shapes, counted on the meta device against diffusers' default (XL-2) model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers import PixArtTransformer2DModel
from diffusers.models.embeddings import get_2d_sincos_pos_embed

from core.archs.pixart.network import PixArt, PixArtConfig
from core.errors import ModelMismatchError
from core.files.writer import write_safetensors
from core.loading.convert.dit_diffusers import convert_shapes, pixart_key_map
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.patching.keymap import Target, model_key_index
from tests.core.generate.reference import pixart_pair
from tests.fixtures.diffusion_layouts_dit import pixart as pixart_layout

T5_WIDTH = 24


@pytest.fixture(scope="module")
def pair() -> tuple[Any, PixArt]:
    return pixart_pair(T5_WIDTH, seed=41)


def _diffusers_eps(hf: Any, x: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    added: dict[str, Any] = {"resolution": None, "aspect_ratio": None}
    if hf.config.use_additional_conditions:  # PixArt-α: what ComfyUI passes, the picture's size
        b, _, h, w = x.shape
        added = {
            "resolution": torch.tensor([[8.0 * h, 8.0 * w]] * b),
            "aspect_ratio": torch.tensor([[h / w]] * b),
        }
    with torch.no_grad():
        out = hf(x, encoder_hidden_states=ctx, timestep=t, added_cond_kwargs=added)
    eps: torch.Tensor = out.sample[:, :4]  # learned sigma: ComfyUI returns only the eps channels
    return eps


@pytest.mark.parametrize(("height", "width", "alpha"), [(36, 36, False), (34, 48, False), (34, 48, True)])
def test_pixart_matches_diffusers(pair: tuple[Any, PixArt], height: int, width: int, alpha: bool) -> None:
    hf, ours = pixart_pair(T5_WIDTH, seed=42, alpha=True) if alpha else pair
    gen = torch.Generator().manual_seed(height)
    x = torch.randn(2, 4, height, width, generator=gen)
    t = torch.tensor([999.0, 421.0])
    ctx = torch.randn(2, 7, T5_WIDTH, generator=gen)
    with torch.no_grad():
        got = ours(x, t, ctx)
    want = _diffusers_eps(hf, x, t, ctx)
    err = float((got - want).abs().max())
    top = float(want.abs().max())
    name = "α" if alpha else "Σ"
    print(f"pixart-{name} {height}x{width}: max |ours - diffusers| = {err:.1e} (|out| <= {top:.2f})")
    assert got.shape == want.shape == (2, 4, height, width)
    assert err < 1e-6
    if alpha:  # the size conditioning reaches the output (so its order is checked)
        with torch.no_grad():
            swapped = ours(x.transpose(2, 3), t, ctx).transpose(2, 3)
        assert float((swapped - got).abs().max()) > 1e-3


@pytest.mark.parametrize(("h", "w"), [(64, 64), (52, 76), (48, 84)])
def test_position_grid_is_diffusers_at_the_released_sizes(h: int, w: int) -> None:
    """ComfyUI computes the grid from the latent's size (base 64 tokens and interpolation 2 for every
    1024-class size); diffusers from its config (sample size 128 -> base 64, interpolation 2): the
    same grid at 1024x1024, 832x1216 and 768x1344."""
    model = PixArt(PixArtConfig(), device="meta")
    ours = model.position_grid((2 * h, 2 * w), h, w, torch.empty(0))[0]
    want = get_2d_sincos_pos_embed(1152, (h, w), base_size=64, interpolation_scale=2.0, output_type="pt")
    assert ours.shape == (h * w, 1152)
    assert float((ours - want.float()).abs().max()) < 1e-5


def test_a_small_latent_gets_a_finite_grid() -> None:
    """At a mean latent side under 32 ComfyUI's interpolation rounds to 0 (and divides by it); ours
    counts one unit."""
    model = PixArt(PixArtConfig(), device="meta")
    assert torch.isfinite(model.position_grid((16, 16), 8, 8, torch.empty(0))).all()


def test_odd_latent_sizes_are_padded_and_cropped(pair: tuple[Any, PixArt]) -> None:
    _, ours = pair
    with torch.no_grad():
        out = ours(torch.randn(1, 4, 35, 37), torch.tensor([500.0]), torch.randn(1, 3, T5_WIDTH))
    assert out.shape == (1, 4, 35, 37) and torch.isfinite(out).all()


def _original_state(ours: PixArt) -> dict[str, torch.Tensor]:
    """The tensors of an original-layout file: the network's, plus the 300-token null caption."""
    state = {k: v.clone() for k, v in ours.state_dict().items()}
    state["y_embedder.y_embedding"] = torch.randn(300, T5_WIDTH, generator=torch.Generator().manual_seed(5))
    return state


@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_a_saved_file_detects_loads_and_runs(tmp_path: Path, pair: tuple[Any, PixArt], layout: str) -> None:
    hf, ours = pair
    state = _original_state(ours) if layout == "original" else dict(hf.state_dict())
    path = write_safetensors(tmp_path / f"pixart-sigma-{layout}.safetensors", state)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", "pixart-sigma")
    assert det.components[0].layout == layout
    loaded = load_diffusion_model(path)
    assert isinstance(loaded.module, PixArt) and loaded.family == "pixart-sigma"
    assert loaded.config.caption_tokens == (300 if layout == "original" else None)
    x, t, ctx = torch.randn(1, 4, 36, 36), torch.tensor([250.0]), torch.randn(1, 5, T5_WIDTH)
    with torch.no_grad():
        assert torch.equal(loaded.module(x, t, ctx), ours(x, t, ctx))


def test_a_stored_position_grid_fixes_the_interpolation() -> None:
    """ComfyUI reads ``pos_embed`` (PixArt 512/256 files keep one) as the trained grid: its side x
    patch / 64 is the interpolation."""
    shapes = {k: tuple(v) for k, v in pixart_layout("sigma").items()}
    assert PixArtConfig.from_shapes(shapes).pe_interpolation is None
    shapes["pos_embed"] = (1, 32 * 32, 1152)
    assert PixArtConfig.from_shapes(shapes).pe_interpolation == 1.0


def test_full_size_shapes_are_diffusers_xl2() -> None:
    shapes = {k: tuple(v) for k, v in pixart_layout("sigma").items()}
    config = PixArtConfig.from_shapes(shapes)
    assert config == PixArtConfig(caption_tokens=300)
    ours = PixArt(config, device="meta")
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
    with torch.device("meta"):
        hf = PixArtTransformer2DModel(caption_channels=4096, use_additional_conditions=False)
    hf_shapes = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    converted = convert_shapes(hf_shapes, pixart_key_map(28), model="PixArt")
    assert converted == {k: v for k, v in shapes.items() if k != "y_embedder.y_embedding"}


def test_alpha_full_size_shapes_are_diffusers_xl2() -> None:
    """PixArt-α 1024: size micro-conditions, 120 caption tokens and a stored 64x64 position grid
    (interpolation 2, as ComfyUI reads it)."""
    shapes = {k: tuple(v) for k, v in pixart_layout("alpha").items()}
    config = PixArtConfig.from_shapes(shapes)
    assert config == PixArtConfig(caption_tokens=120, pos_embed_tokens=4096, micro_condition=True)
    assert config.pe_interpolation == 2.0
    assert {k: tuple(v.shape) for k, v in PixArt(config, device="meta").state_dict().items()} == shapes
    with torch.device("meta"):
        hf = PixArtTransformer2DModel(caption_channels=4096, use_additional_conditions=True)
    hf_shapes = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    converted = convert_shapes(hf_shapes, pixart_key_map(28, micro_condition=True), model="PixArt")
    assert converted == {k: v for k, v in shapes.items() if k not in ("y_embedder.y_embedding", "pos_embed")}


def test_from_shapes_refuses_other_models() -> None:
    with pytest.raises(ModelMismatchError):
        PixArtConfig.from_shapes({"img_in.weight": (3072, 64)})


def test_lora_names_land_on_the_fused_weights(pair: tuple[Any, PixArt]) -> None:
    """A LoRA trained on diffusers' PixArt (PEFT or kohya names) patches slices of the original's
    fused ``qkv`` and ``kv_linear``; the original's own names (and their kohya flattening) work too."""
    _, ours = pair
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    index = model_key_index("diffusion_model", "pixart-sigma", shapes, ours.config)
    kv = "blocks.1.cross_attn.kv_linear.weight"
    assert index.resolve("transformer_blocks.1.attn2.to_k") == Target("diffusion_model", kv, (0, 0, 32))
    assert index.resolve("transformer_blocks.1.attn2.to_v") == Target("diffusion_model", kv, (0, 32, 32))
    qkv = "blocks.0.attn.qkv.weight"
    assert index.resolve("transformer_blocks_0_attn1_to_v") == Target("diffusion_model", qkv, (0, 64, 32))
    assert index.resolve("proj_out") == Target("diffusion_model", "final_layer.linear.weight")
    assert index.resolve("blocks_0_cross_attn_proj") == Target(
        "diffusion_model", "blocks.0.cross_attn.proj.weight"
    )
