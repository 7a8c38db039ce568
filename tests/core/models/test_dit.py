"""SD3 MMDiT, Flux and Chroma against diffusers (a test-only reference).

Tiny configs: random diffusers weights (fixed seed), converted with our key maps, loaded strictly,
run on identical inputs in fp32. Full-size configs: built on the meta device, counted, and checked
key-for-key and shape-for-shape against diffusers' models and diffusers' own single-file converters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from diffusers import ChromaTransformer2DModel, FluxTransformer2DModel, SD3Transformer2DModel
from diffusers.loaders import single_file_utils as sfu

from core.errors import LoadoutError, ModelMismatchError
from core.loading.convert.dit_diffusers import (
    KeyMapping,
    chroma_diffusers_to_original,
    chroma_key_map,
    convert_shapes,
    convert_state_dict,
    flux_diffusers_to_original,
    flux_key_map,
    sd3_diffusers_to_original,
    sd3_key_map,
)
from core.models.chroma import Chroma, ChromaConfig
from core.models.flux import (
    Flux,
    FluxConfig,
    make_img_ids,
    make_txt_ids,
    pack_latents,
    unpack_latents,
)
from core.models.mmdit import MMDiT, MMDiTConfig

TOLERANCE = 1e-4
pytestmark = pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning")


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """Max absolute difference relative to the reference's largest magnitude."""
    return float((ours - ref).abs().max() / ref.abs().max())


def perturb(model: torch.nn.Module, seed: int) -> None:
    """Move every tensor off its init (norm weights off 1, zero biases off 0) so layout errors show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            t.add_(0.1 * torch.randn(t.shape, generator=gen))


def shapes_of(model: torch.nn.Module | dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    state = model.state_dict() if isinstance(model, torch.nn.Module) else model
    return {k: tuple(v.shape) for k, v in state.items()}


def load_strict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    result = model.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys


# --- diffusers kwargs for our configs --------------------------------------------------------


def sd3_kwargs(c: MMDiTConfig) -> dict[str, Any]:
    return {
        "sample_size": c.pos_embed_max_size,
        "patch_size": c.patch_size,
        "in_channels": c.in_channels,
        "num_layers": c.depth,
        "attention_head_dim": c.head_dim,
        "num_attention_heads": c.num_heads,
        "joint_attention_dim": c.context_dim,
        "caption_projection_dim": c.hidden_size,
        "pooled_projection_dim": c.adm_in_channels,
        "out_channels": c.out_channels,
        "pos_embed_max_size": c.pos_embed_max_size,
        "dual_attention_layers": c.dual_attention_layers,
        "qk_norm": "rms_norm" if c.qk_norm == "rms" else None,
    }


def flux_kwargs(c: FluxConfig | ChromaConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "patch_size": 1,
        "in_channels": c.in_channels,
        "out_channels": c.out_channels,
        "num_layers": c.depth,
        "num_single_layers": c.depth_single_blocks,
        "attention_head_dim": c.hidden_size // c.num_heads,
        "num_attention_heads": c.num_heads,
        "joint_attention_dim": c.context_in_dim,
        "axes_dims_rope": c.axes_dim,
    }
    if isinstance(c, FluxConfig):
        kwargs.update(pooled_projection_dim=c.vec_in_dim, guidance_embeds=c.guidance_embed)
    else:
        kwargs.update(
            approximator_num_channels=c.approximator_in_dim,
            approximator_hidden_dim=c.approximator_hidden,
            approximator_layers=c.approximator_depth,
        )
    return kwargs


# --- tiny parity -----------------------------------------------------------------------------

TINY_SD3 = {
    "sd3": MMDiTConfig(
        depth=2, num_heads=2, head_dim=16, pos_embed_max_size=8, context_dim=24, adm_in_channels=20
    ),
    "sd3.5-medium-like": MMDiTConfig(
        depth=3,
        num_heads=2,
        head_dim=16,
        pos_embed_max_size=8,
        context_dim=24,
        adm_in_channels=20,
        qk_norm="rms",
        dual_attention_layers=(0, 1),
    ),
    "sd3.5-large-like": MMDiTConfig(
        depth=2,
        num_heads=3,
        head_dim=8,
        pos_embed_max_size=6,
        context_dim=24,
        adm_in_channels=20,
        qk_norm="rms",
    ),
}


@pytest.mark.parametrize("name", list(TINY_SD3))
def test_mmdit_matches_diffusers(name: str) -> None:
    config = TINY_SD3[name]
    torch.manual_seed(0)
    ref = SD3Transformer2DModel(**sd3_kwargs(config)).eval()
    perturb(ref, seed=1)
    ours = MMDiT(config).eval()
    load_strict(ours, sd3_diffusers_to_original(ref.state_dict(), config))

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, config.in_channels, 6, 8, generator=gen)  # 3x4 patches of an 8x8 (or 6x6) grid
    t = torch.tensor([999.0, 250.5])
    context = torch.randn(2, 5, 24, generator=gen)
    y = torch.randn(2, 20, generator=gen)
    with torch.no_grad():
        expected = ref(
            hidden_states=x, encoder_hidden_states=context, pooled_projections=y, timestep=t
        ).sample
        got = ours(x, t, context, y)
    assert got.shape == expected.shape == x.shape
    err = rel_err(got, expected)
    print(f"{name}: max rel err {err:.2e}")
    assert err <= TOLERANCE


TINY_FLUX = {
    "dev": FluxConfig(
        in_channels=16,
        out_channels=16,
        vec_in_dim=12,
        context_in_dim=20,
        hidden_size=32,
        num_heads=2,
        depth=2,
        depth_single_blocks=2,
        axes_dim=(4, 6, 6),
    ),
}
TINY_FLUX["schnell"] = dataclasses.replace(
    TINY_FLUX["dev"], guidance_embed=False, depth=1, depth_single_blocks=1
)
TINY_FLUX["fill"] = dataclasses.replace(TINY_FLUX["dev"], in_channels=24, out_channels=16)


def flux_inputs(in_channels: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    latent = torch.randn(2, in_channels // 4, 6, 8, generator=gen)
    return {
        "img": pack_latents(latent),
        "img_ids": make_img_ids(2, 6, 8),
        # non-zero text ids so RoPE on text tokens is exercised too
        "txt_ids": make_img_ids(2, 4, 6, index=1)[:, :5],
        "txt": torch.randn(2, 5, 20, generator=gen),
        "timesteps": torch.tensor([1.0, 0.3]),
    }


@pytest.mark.parametrize("name", list(TINY_FLUX))
def test_flux_matches_diffusers(name: str) -> None:
    config = TINY_FLUX[name]
    torch.manual_seed(0)
    ref = FluxTransformer2DModel(**flux_kwargs(config)).eval()
    perturb(ref, seed=1)
    ours = Flux(config).eval()
    load_strict(ours, flux_diffusers_to_original(ref.state_dict(), config))

    inp = flux_inputs(config.in_channels)
    y = torch.randn(2, config.vec_in_dim, generator=torch.Generator().manual_seed(4))
    guidance = torch.tensor([3.5, 1.0]) if config.guidance_embed else None
    with torch.no_grad():
        expected = ref(
            hidden_states=inp["img"],
            encoder_hidden_states=inp["txt"],
            pooled_projections=y,
            timestep=inp["timesteps"],
            img_ids=inp["img_ids"][0],
            txt_ids=inp["txt_ids"][0],
            guidance=guidance,
        ).sample
        got = ours(inp["img"], inp["img_ids"], inp["txt"], inp["txt_ids"], inp["timesteps"], y, guidance)
    assert got.shape == expected.shape == (2, 12, config.out_channels)
    err = rel_err(got, expected)
    print(f"flux {name}: max rel err {err:.2e}")
    assert err <= TOLERANCE


TINY_CHROMA = ChromaConfig(
    in_channels=16,
    out_channels=16,
    context_in_dim=20,
    hidden_size=32,
    num_heads=2,
    depth=2,
    depth_single_blocks=2,
    axes_dim=(4, 6, 6),
    approximator_in_dim=16,
    approximator_hidden=24,
    approximator_depth=2,
)


def test_chroma_matches_diffusers() -> None:
    config = TINY_CHROMA
    torch.manual_seed(0)
    ref = ChromaTransformer2DModel(**flux_kwargs(config)).eval()
    perturb(ref, seed=1)
    ours = Chroma(config).eval()
    load_strict(ours, chroma_diffusers_to_original(ref.state_dict(), config))

    inp = flux_inputs(config.in_channels)
    with torch.no_grad():
        expected = ref(
            hidden_states=inp["img"],
            encoder_hidden_states=inp["txt"],
            timestep=inp["timesteps"],
            img_ids=inp["img_ids"][0],
            txt_ids=inp["txt_ids"][0],
        ).sample
        got = ours(inp["img"], inp["img_ids"], inp["txt"], inp["txt_ids"], inp["timesteps"])
        masked = ours(
            inp["img"],
            inp["img_ids"],
            inp["txt"],
            inp["txt_ids"],
            inp["timesteps"],
            txt_mask=torch.ones(2, 5),
        )
    err = rel_err(got, expected)
    print(f"chroma: max rel err {err:.2e}")
    assert err <= TOLERANCE
    assert torch.equal(masked, got)


# --- full-size configs on the meta device --------------------------------------------------

# Tensor counts of the released files' diffusion models (keys after model.diffusion_model.).
# flux1-dev's 780 is published; the others follow from the layouts, which the tests below check
# against diffusers' models and its own single-file (original -> diffusers) converters.
FULL: dict[str, tuple[Callable[[], Any], type[torch.nn.Module], int]] = {
    "sd3-medium": (MMDiTConfig.sd3_medium, MMDiT, 491),
    "sd3.5-medium": (MMDiTConfig.sd35_medium, MMDiT, 665),
    "sd3.5-large": (MMDiTConfig.sd35_large, MMDiT, 923),
    "flux-dev": (FluxConfig.dev, Flux, 780),
    "flux-schnell": (FluxConfig.schnell, Flux, 776),
    "flux-fill": (FluxConfig.fill, Flux, 780),
    "flux-depth": (FluxConfig.depth_control, Flux, 780),
    "chroma": (ChromaConfig, Chroma, 643),
}


@pytest.mark.parametrize("name", list(FULL))
def test_full_size_counts_and_from_shapes(name: str) -> None:
    make_config, cls, tensors = FULL[name]
    config = make_config()
    model = cls(config, device="meta")
    shapes = shapes_of(model)
    assert len(shapes) == tensors
    assert type(config).from_shapes(shapes) == config
    prefixed = {f"model.diffusion_model.{k}": v for k, v in shapes.items()} | {"vae.x.weight": (1,)}
    assert type(config).from_shapes(prefixed) == config


def diffusers_on_meta(config: Any) -> torch.nn.Module:
    with torch.device("meta"):
        if isinstance(config, MMDiTConfig):
            return SD3Transformer2DModel(**sd3_kwargs(config))
        if isinstance(config, FluxConfig):
            return FluxTransformer2DModel(**flux_kwargs(config))
        return ChromaTransformer2DModel(**flux_kwargs(config))


def key_map_for(config: Any) -> tuple[KeyMapping, ...]:
    if isinstance(config, MMDiTConfig):
        return sd3_key_map(config)
    if isinstance(config, FluxConfig):
        return flux_key_map(config)
    return chroma_key_map(config)


@pytest.mark.parametrize("name", list(FULL))
def test_full_size_key_map_covers_diffusers(name: str) -> None:
    make_config, cls, _ = FULL[name]
    config = make_config()
    ours = shapes_of(cls(config, device="meta"))
    ref = diffusers_on_meta(config)
    mapped = convert_shapes(shapes_of(ref), key_map_for(config))
    assert mapped == ours
    # each diffusers tensor is used exactly once
    used = [k for m in key_map_for(config) for k in m.diffusers]
    assert len(used) == len(set(used)) == len(ref.state_dict())


DIFFUSERS_CONVERTERS = {
    "sd3-medium": sfu.convert_sd3_transformer_checkpoint_to_diffusers,
    "sd3.5-medium": sfu.convert_sd3_transformer_checkpoint_to_diffusers,
    "sd3.5-large": sfu.convert_sd3_transformer_checkpoint_to_diffusers,
    "flux-dev": sfu.convert_flux_transformer_checkpoint_to_diffusers,
    "flux-schnell": sfu.convert_flux_transformer_checkpoint_to_diffusers,
    "flux-fill": sfu.convert_flux_transformer_checkpoint_to_diffusers,
    "chroma": sfu.convert_chroma_transformer_checkpoint_to_diffusers,
}


@pytest.mark.parametrize("name", list(DIFFUSERS_CONVERTERS))
def test_original_layout_is_what_diffusers_single_file_reads(name: str) -> None:
    """diffusers' own original->diffusers converter consumes exactly our keys, into its model's shapes."""
    make_config, cls, _ = FULL[name]
    config = make_config()
    checkpoint = dict(cls(config, device="meta").state_dict())
    converted = DIFFUSERS_CONVERTERS[name](checkpoint)
    assert checkpoint == {}  # the converter pops every key it understands
    assert shapes_of(converted) == shapes_of(diffusers_on_meta(config))


# --- errors, helpers, dtypes -----------------------------------------------------------------


def test_converter_reports_unmapped_and_absent_keys() -> None:
    schnell = TINY_FLUX["schnell"]
    state = dict(FluxTransformer2DModel(**flux_kwargs(schnell)).state_dict())
    extra = state | {"transformer_blocks.0.attn.extra.weight": torch.zeros(1)}
    with pytest.raises(
        ModelMismatchError, match=r"1 unmapped diffusers keys: transformer_blocks\.0\.attn\.extra"
    ):
        flux_diffusers_to_original(extra, schnell)
    # a dev config expects guidance-embedder tensors that a schnell file lacks
    with pytest.raises(ModelMismatchError, match=r"expected keys absent: time_text_embed\.guidance_embedder"):
        flux_diffusers_to_original(state, dataclasses.replace(schnell, guidance_embed=True))
    with pytest.raises(ModelMismatchError, match="Cannot fuse"):
        convert_shapes({"a": (2, 3), "b": (2, 4)}, [KeyMapping("ab", ("a", "b"))])


def test_swap_halves_and_concat() -> None:
    a, b = torch.arange(4.0).reshape(2, 2), torch.arange(4.0, 8.0).reshape(2, 2)
    out = convert_state_dict({"a": a, "b": b}, [KeyMapping("ab", ("a", "b"), swap_halves=True)])
    assert torch.equal(out["ab"], torch.cat((b, a)))


def test_from_shapes_rejects_other_models() -> None:
    with pytest.raises(ModelMismatchError):
        MMDiTConfig.from_shapes({"double_blocks.0.img_attn.qkv.weight": (9, 3)})
    with pytest.raises(ModelMismatchError):
        FluxConfig.from_shapes({"joint_blocks.0.x_block.attn.qkv.weight": (9, 3)})


def test_pack_unpack_and_ids_match_diffusers_pipeline() -> None:
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline

    latent = torch.randn(2, 16, 6, 10)
    packed = pack_latents(latent)
    assert torch.equal(packed, FluxPipeline._pack_latents(latent, 2, 16, 6, 10))
    assert torch.equal(unpack_latents(packed, 6, 10), latent)
    assert torch.equal(
        make_img_ids(2, 6, 10)[1], FluxPipeline._prepare_latent_image_ids(2, 3, 5, "cpu", torch.float32)
    )
    odd = torch.randn(1, 16, 5, 7)
    assert pack_latents(odd).shape == (1, 3 * 4, 64) == (1, make_img_ids(1, 5, 7).shape[1], 64)
    assert torch.equal(unpack_latents(pack_latents(odd), 5, 7), odd)
    assert make_txt_ids(2, 7).shape == (2, 7, 3)


def test_flux_dev_needs_guidance_and_mmdit_limits_size() -> None:
    flux = Flux(TINY_FLUX["dev"])
    perturb(flux, seed=0)
    inp = flux_inputs(16)
    with pytest.raises(LoadoutError, match="guidance"):
        flux(inp["img"], inp["img_ids"], inp["txt"], inp["txt_ids"], inp["timesteps"], torch.zeros(2, 12))
    mmdit = MMDiT(TINY_SD3["sd3"])
    perturb(mmdit, seed=0)
    with pytest.raises(LoadoutError, match="too large"):
        mmdit(torch.zeros(1, 16, 18, 8), torch.zeros(1), torch.zeros(1, 3, 24), torch.zeros(1, 20))


def test_mmdit_pads_odd_sizes_and_casts_at_forward() -> None:
    config = TINY_SD3["sd3.5-medium-like"]
    model = MMDiT(config)
    for t in model.state_dict().values():
        torch.nn.init.normal_(t, std=0.1, generator=torch.Generator().manual_seed(5))
    x, t = torch.randn(1, 16, 7, 5), torch.tensor([500.0])
    ctx, y = torch.randn(1, 4, 24), torch.randn(1, 20)
    with torch.no_grad():
        out32 = model(x, t, ctx, y)
        out16 = model(x.bfloat16(), t, ctx, y)
    assert out32.shape == x.shape and out16.dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # weights untouched by the cast
    assert rel_err(out16.float(), out32) < 0.05


def test_rope_is_computed_on_the_cpu_for_devices_without_float64() -> None:
    """Apple's MPS and Intel's XPU have no float64: the Flux/Chroma RoPE angles are computed on the
    CPU there and moved (ComfyUI's rule); elsewhere where the ids are."""
    from core.models.flux_blocks import rope, rope_device

    assert rope_device(torch.device("mps")) == torch.device("cpu")
    assert rope_device(torch.device("xpu", 0)) == torch.device("cpu")
    assert rope_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.0), torch.arange(6.0), indexing="ij"), -1)
    pe = rope(ids.reshape(1, -1, 3), (16, 56, 56), 10_000)
    assert pe.dtype == torch.float32 and pe.shape == (1, 1, 24, 64, 2) and pe.device == ids.device
