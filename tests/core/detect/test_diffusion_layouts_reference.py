"""The fixture layouts against diffusers, the independent reference, and detection of diffusers' models.

Original layouts go through diffusers' own single-file converters and must then load strictly into
the diffusers model built on the meta device (same keys, same shapes, nothing left over); diffusers
layouts must equal the model's state dict. Then the real diffusers state dicts are classified.
No tensor data exists anywhere: meta tensors only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from core.detect.diffusion import match_controlnet, match_diffusion
from core.detect.keyview import KeyView
from core.files.tensor_info import TensorInfo
from tests.fixtures import layouts_diffusion as L
from tests.fixtures.diffusion_layouts_mmdit import (
    flux_controlnet_diffusers,
    sd3_controlnet_diffusers,
)

torch = pytest.importorskip("torch")
D = pytest.importorskip("diffusers")
S = pytest.importorskip("diffusers.loaders.single_file_utils")

Shapes = dict[str, tuple[int, ...]]

# diffusers deprecates some of its own internals while building Flux-family models; not our concern
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

_XL = {
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "block_out_channels": (320, 640, 1280),
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "use_linear_projection": True,
}
UNET_CONFIGS: dict[str, dict[str, Any]] = {
    "sd1": {"cross_attention_dim": 768},
    "sd2": {
        "cross_attention_dim": 1024,
        "attention_head_dim": [5, 10, 20, 20],
        "use_linear_projection": True,
    },
    "sdxl": {
        **_XL,
        "transformer_layers_per_block": [1, 2, 10],
        "cross_attention_dim": 2048,
        "projection_class_embeddings_input_dim": 2816,
    },
    "sdxl-refiner": {
        **_XL,
        "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        "block_out_channels": (384, 768, 1536, 1536),
        "transformer_layers_per_block": 4,
        "cross_attention_dim": 1280,
        "projection_class_embeddings_input_dim": 2560,
    },
}
SD3_CONFIGS: dict[str, dict[str, Any]] = {
    "sd3": {
        "num_layers": 24,
        "num_attention_heads": 24,
        "caption_projection_dim": 1536,
        "pos_embed_max_size": 192,
    },
    "sd3.5-medium": {
        "num_layers": 24,
        "num_attention_heads": 24,
        "caption_projection_dim": 1536,
        "pos_embed_max_size": 384,
        "qk_norm": "rms_norm",
        "dual_attention_layers": tuple(range(13)),
    },
    "sd3.5-large": {
        "num_layers": 38,
        "num_attention_heads": 38,
        "caption_projection_dim": 2432,
        "pos_embed_max_size": 192,
        "qk_norm": "rms_norm",
    },
}
SD3_COMMON = {
    "attention_head_dim": 64,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 2048,
    "out_channels": 16,
}
FLUX_CONFIGS: dict[str, dict[str, Any]] = {
    "dev": {"guidance_embeds": True},
    "schnell": {"guidance_embeds": False},
    "fill": {"guidance_embeds": True, "in_channels": 384, "out_channels": 64},
    "depth": {"guidance_embeds": True, "in_channels": 128, "out_channels": 64},
}
WAN_CONFIGS: dict[str, dict[str, Any]] = {
    "1.3B": {"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30},
    "5B": {
        "num_attention_heads": 24,
        "ffn_dim": 14336,
        "num_layers": 30,
        "in_channels": 48,
        "out_channels": 48,
    },
    "14B": {"num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40},
}
HIDREAM_CONFIG: dict[str, Any] = {
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 16,
    "num_single_layers": 32,
    "attention_head_dim": 128,
    "num_attention_heads": 20,
    "caption_channels": [4096, 4096],
    "text_emb_dim": 2048,
    "num_routed_experts": 4,
    "num_activated_experts": 2,
    "axes_dims_rope": (64, 32, 32),
    "max_resolution": (128, 128),
    "llama_layers": list(range(48)),
}


def shapes_of(model: Any) -> Shapes:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def build(cls: Callable[..., Any], **config: Any) -> Shapes:
    with torch.device("meta"):
        return shapes_of(cls(**config))


def meta(layout: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    return {k: torch.empty(s, device="meta") for k, s in layout.items()}


def converted(convert: Callable[..., Any], layout: Mapping[str, tuple[int, ...]]) -> Shapes:
    """Run a diffusers converter on meta tensors; a converter that pops what it uses must use every key."""
    source = meta(layout)
    out = convert(source)
    if out is not source and len(source) < len(layout):
        assert sorted(source) == [], "fixture keys the converter does not know"
    return {k: tuple(v.shape) for k, v in out.items() if v is not None}


def assert_same(reference: Shapes, ours: Shapes) -> None:
    assert sorted(set(reference) - set(ours)) == [], "keys missing from the fixture"
    assert sorted(set(ours) - set(reference)) == [], "keys the reference model does not have"
    assert {k: v for k, v in ours.items() if reference[k] != v} == {}, "shape mismatches"


def view_of(shapes: Mapping[str, tuple[int, ...]]) -> KeyView:
    return KeyView({k: TensorInfo("BF16", s, 2 * _numel(s)) for k, s in shapes.items()})


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("family", sorted(UNET_CONFIGS))
def test_unet_layouts_match_diffusers(family: str) -> None:
    reference = build(D.UNet2DConditionModel, **UNET_CONFIGS[family])
    assert_same(reference, L.unet(family, layout="diffusers"))
    ldm = {"model.diffusion_model." + k: v for k, v in L.unet(family).items()}
    config = UNET_CONFIGS[family] | {"layers_per_block": 2}
    out = S.convert_ldm_unet_checkpoint(meta(ldm), config)
    assert_same(reference, {k: tuple(v.shape) for k, v in out.items()})
    assert len(ldm) == len(reference)  # the mapping is one to one: no fixture key went unused


def test_unet_tensor_counts() -> None:
    assert len(L.unet("sd1")) == 686
    assert len(L.unet("sdxl")) == 1680
    assert len(L.sdxl_checkpoint()) == 2515


@pytest.mark.parametrize("kind", sorted(SD3_CONFIGS))
def test_sd3_layouts_match_diffusers(kind: str) -> None:
    reference = build(D.SD3Transformer2DModel, **SD3_COMMON, **SD3_CONFIGS[kind])
    assert_same(reference, L.sd3_diffusers(kind))
    assert_same(reference, converted(S.convert_sd3_transformer_checkpoint_to_diffusers, L.sd3_mmdit(kind)))


@pytest.mark.parametrize("kind", sorted(FLUX_CONFIGS))
def test_flux_layouts_match_diffusers(kind: str) -> None:
    reference = build(D.FluxTransformer2DModel, **FLUX_CONFIGS[kind])
    assert_same(reference, L.flux_diffusers(kind))
    assert_same(reference, converted(S.convert_flux_transformer_checkpoint_to_diffusers, L.flux(kind)))


def test_flux_tensor_counts() -> None:
    assert len(L.flux("dev")) == 780
    assert len(L.flux("schnell")) == 776


ORIGINAL_CASES: dict[str, tuple[Callable[[], Shapes], Callable[[], Shapes], Callable[..., Any]]] = {
    "chroma": (
        lambda: build(D.ChromaTransformer2DModel),
        L.chroma,
        S.convert_chroma_transformer_checkpoint_to_diffusers,
    ),
    "auraflow": (
        lambda: build(D.AuraFlowTransformer2DModel, pos_embed_max_size=9216, sample_size=128),
        L.auraflow,
        S.convert_auraflow_transformer_checkpoint_to_diffusers,
    ),
    "lumina2": (
        lambda: build(D.Lumina2Transformer2DModel, cap_feat_dim=2304),
        L.lumina2,
        S.convert_lumina2_to_diffusers,
    ),
    "z-image": (
        lambda: build(D.ZImageTransformer2DModel),
        L.z_image,
        S.convert_z_image_transformer_checkpoint_to_diffusers,
    ),
    "hidream": (
        lambda: build(D.HiDreamImageTransformer2DModel, **HIDREAM_CONFIG),
        L.hidream,
        S.convert_hidream_transformer_to_diffusers,
    ),
    "wan-i2v-14B": (
        lambda: build(
            D.WanTransformer3DModel,
            **WAN_CONFIGS["14B"],
            in_channels=36,
            image_dim=1280,
            added_kv_proj_dim=5120,
        ),
        lambda: L.wan("14B", in_dim=36, image_embed=True),
        S.convert_wan_transformer_to_diffusers,
    ),
    "hunyuan-video": (
        lambda: build(D.HunyuanVideoTransformer3DModel),
        L.hunyuan_video,
        S.convert_hunyuan_video_transformer_to_diffusers,
    ),
    "ltxv": (
        lambda: build(D.LTXVideoTransformer3DModel),
        L.ltxv,
        S.convert_ltx_transformer_checkpoint_to_diffusers,
    ),
}
for _size, _cfg in WAN_CONFIGS.items():
    ORIGINAL_CASES[f"wan-{_size}"] = (
        lambda c=_cfg: build(D.WanTransformer3DModel, **c),
        lambda s=_size, c=_cfg: L.wan(s, in_dim=c.get("in_channels", 16), out_dim=c.get("out_channels", 16)),
        S.convert_wan_transformer_to_diffusers,
    )


@pytest.mark.parametrize("case", sorted(ORIGINAL_CASES))
def test_dit_layouts_convert_to_diffusers(case: str) -> None:
    reference, layout, convert = ORIGINAL_CASES[case]
    assert_same(reference(), converted(convert, layout()))


def test_qwen_image_layout_is_the_diffusers_model() -> None:
    assert_same(build(D.QwenImageTransformer2DModel), L.qwen_image())


def test_partial_layouts_use_real_names_and_shapes() -> None:
    """Stable Cascade fixtures hold a subset of keys: each must exist in the model with its shape."""
    res, ts, at = "SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"
    stage_c = build(
        D.StableCascadeUNet,
        block_out_channels=[2048, 2048],
        block_types_per_layer=[[res, ts, at]] * 2,
        clip_image_in_channels=768,
        clip_seq=4,
        clip_text_in_channels=1280,
        clip_text_pooled_in_channels=1280,
        conditioning_dim=2048,
        down_blocks_repeat_mappers=[1, 1],
        down_num_layers_per_block=[8, 24],
        dropout=[0.1, 0.1],
        effnet_in_channels=None,
        in_channels=16,
        kernel_size=3,
        num_attention_heads=[32, 32],
        out_channels=16,
        patch_size=1,
        pixel_mapper_in_channels=None,
        self_attn=True,
        switch_level=[False],
        timestep_conditioning_type=["sca", "crp"],
        timestep_ratio_embedding_dim=64,
        up_blocks_repeat_mappers=[1, 1],
        up_num_layers_per_block=[24, 8],
    )
    ours = converted(S.convert_stable_cascade_unet_single_file_to_diffusers, L.cascade_c())
    assert {k: v for k, v in ours.items() if stage_c.get(k) != v} == {}


def test_transformer_controlnet_layouts_match_diffusers() -> None:
    assert_same(
        build(D.FluxControlNetModel, num_layers=5, num_single_layers=10, guidance_embeds=True),
        flux_controlnet_diffusers(),
    )
    cfg = SD3_COMMON | SD3_CONFIGS["sd3"] | {"num_layers": 12}
    cfg.pop("out_channels")
    assert_same(build(D.SD3ControlNetModel, **cfg), sd3_controlnet_diffusers())


# -- diffusers' own state dicts, classified --------------------------------------------------------------
DIFFUSERS_MODELS: dict[str, tuple[str, Callable[[], Shapes]]] = {
    "sd1": ("sd1", lambda: build(D.UNet2DConditionModel, **UNET_CONFIGS["sd1"])),
    "sdxl": ("sdxl", lambda: build(D.UNet2DConditionModel, **UNET_CONFIGS["sdxl"])),
    "sdxl-inpaint": ("sdxl", lambda: build(D.UNet2DConditionModel, **UNET_CONFIGS["sdxl"], in_channels=9)),
    "sd3.5-large": (
        "sd3.5-large",
        lambda: build(D.SD3Transformer2DModel, **SD3_COMMON, **SD3_CONFIGS["sd3.5-large"]),
    ),
    "flux-dev": ("flux-dev", lambda: build(D.FluxTransformer2DModel, guidance_embeds=True)),
    "chroma": ("chroma", lambda: build(D.ChromaTransformer2DModel)),
    "auraflow": ("auraflow", lambda: build(D.AuraFlowTransformer2DModel)),
    "lumina2": ("lumina2", lambda: build(D.Lumina2Transformer2DModel, cap_feat_dim=2304)),
    "z-image": ("z-image", lambda: build(D.ZImageTransformer2DModel)),
    "pixart-alpha": (
        "pixart-alpha",
        lambda: build(
            D.PixArtTransformer2DModel,
            num_layers=28,
            sample_size=128,
            norm_type="ada_norm_single",
            use_additional_conditions=True,
            out_channels=8,
        ),
    ),
    "wan-1.3B": ("wan2.1", lambda: build(D.WanTransformer3DModel, **WAN_CONFIGS["1.3B"])),
    "hunyuan-video": ("hunyuan-video", lambda: build(D.HunyuanVideoTransformer3DModel)),
    "ltxv": ("ltxv", lambda: build(D.LTXVideoTransformer3DModel)),
    "qwen-image": ("qwen-image", lambda: build(D.QwenImageTransformer2DModel)),
}


@pytest.mark.parametrize("name", sorted(DIFFUSERS_MODELS))
def test_diffusers_models_are_classified(name: str) -> None:
    family, make = DIFFUSERS_MODELS[name]
    found = match_diffusion(view_of(make()))
    assert found, f"{name} was not recognised"
    assert found[0].family == family
    if name != "qwen-image":  # Qwen-Image was released in the diffusers naming: it is its original layout
        assert found[0].layout == "diffusers"
    if name == "sdxl-inpaint":
        assert found[0].variant == "inpaint"


def test_diffusers_controlnets_are_classified_and_not_taken_for_unets() -> None:
    for config, base in ((UNET_CONFIGS["sd1"], "sd1"), (UNET_CONFIGS["sdxl"], "sdxl")):
        cfg = {k: v for k, v in config.items() if k not in ("up_block_types",)}
        view = view_of(build(D.ControlNetModel, **cfg))
        assert match_diffusion(view) == []
        found = match_controlnet(view)
        assert found is not None and (found.family, found.layout) == (base, "diffusers")
