"""IP-Adapter files in h94's layout (``image_proj.*``, ``ip_adapter.N.to_k_ip/to_v_ip``) with random
weights at real width, for a UNet whose cross-attention layers have the given inner widths, and a
tiny SD1-width diffusers UNet beside Loadout's copy of it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.models.unet import UNetConfig, UNetModel
from tests.core.generate.controlnet_pair import UNET, _blocks
from tests.core.generate.reference import randomize
from tests.fixtures.st_files import write_tensors

CROSS = 768  # SD1's cross-attention width
#: the tiny UNet's cross-attention layers in the adapter's order: input 1, output 2, output 3, middle
INNER = (32, 32, 32, 64)
SDXL_CROSS = 2048
#: the tiny SDXL-width UNet's: input 2 (two transformer blocks), output 0 and 1 (two each), middle (two)
SDXL_INNER = (64,) * 8
#: an SDXL class vector: CLIP-G's pooled 1280 and six 256-wide size embeddings (the real 2816)
SDXL_ADM = 1280 + 6 * 256


def sdxl_unet_config(adm: int | None = None) -> UNetConfig:
    return UNetConfig.per_level(
        model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(0, 2),
        transformer_depth_middle=2, context_dim=SDXL_CROSS, num_head_channels=16,
        use_linear_in_transformer=True, adm_in_channels=adm,
    )  # fmt: skip


SDXL_UNET = sdxl_unet_config()


def _w(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=gen) / math.sqrt(shape[-1])


def _linear_proj(
    gen: torch.Generator, embed: int, tokens: int, cross: int = CROSS
) -> dict[str, torch.Tensor]:
    return {
        "image_proj.proj.weight": _w(gen, tokens * cross, embed),
        "image_proj.proj.bias": 0.1 * torch.randn(tokens * cross, generator=gen),
        "image_proj.norm.weight": 1 + 0.1 * torch.randn(cross, generator=gen),
        "image_proj.norm.bias": 0.1 * torch.randn(cross, generator=gen),
    }


def _resampler(
    gen: torch.Generator, embed: int, *, dim: int = CROSS, out: int = CROSS, heads: int = 12, depth: int = 4
) -> dict[str, torch.Tensor]:
    """The perceiver resampler (SD1.5 plus: dim 768, 12 heads; SDXL plus: dim 1280, 20 heads, out 2048)."""
    inner, queries = 64 * heads, 16
    state = {
        "image_proj.latents": torch.randn(1, queries, dim, generator=gen) / math.sqrt(dim),
        "image_proj.proj_in.weight": _w(gen, dim, embed),
        "image_proj.proj_in.bias": 0.1 * torch.randn(dim, generator=gen),
        "image_proj.proj_out.weight": _w(gen, out, dim),
        "image_proj.proj_out.bias": 0.1 * torch.randn(out, generator=gen),
        "image_proj.norm_out.weight": 1 + 0.1 * torch.randn(out, generator=gen),
        "image_proj.norm_out.bias": 0.1 * torch.randn(out, generator=gen),
    }
    for i in range(depth):
        p = f"image_proj.layers.{i}."
        for n in ("0.norm1", "0.norm2", "1.0"):
            state[f"{p}{n}.weight"] = 1 + 0.1 * torch.randn(dim, generator=gen)
            state[f"{p}{n}.bias"] = 0.1 * torch.randn(dim, generator=gen)
        state[f"{p}0.to_q.weight"] = _w(gen, inner, dim)
        state[f"{p}0.to_kv.weight"] = _w(gen, 2 * inner, dim)
        state[f"{p}0.to_out.weight"] = _w(gen, dim, inner)
        state[f"{p}1.1.weight"] = _w(gen, 4 * dim, dim)
        state[f"{p}1.3.weight"] = _w(gen, dim, 4 * dim)
    return state


def _mlp(gen: torch.Generator, hidden: int = 1280, cross: int = CROSS) -> dict[str, torch.Tensor]:
    """h94's full-face MLP projection (``proj.0`` hidden -> hidden, GELU, ``proj.2`` -> cross,
    ``proj.3`` the norm)."""
    return {
        "image_proj.proj.0.weight": _w(gen, hidden, hidden),
        "image_proj.proj.0.bias": 0.1 * torch.randn(hidden, generator=gen),
        "image_proj.proj.2.weight": _w(gen, cross, hidden),
        "image_proj.proj.2.bias": 0.1 * torch.randn(cross, generator=gen),
        "image_proj.proj.3.weight": 1 + 0.1 * torch.randn(cross, generator=gen),
        "image_proj.proj.3.bias": 0.1 * torch.randn(cross, generator=gen),
    }


def ip_adapter_file(
    path: Path, *, plus: bool, seed: int = 0, sdxl: bool = False, embed: int = 1024,
    inners: tuple[int, ...] | None = None, full: bool = False,
) -> Path:  # fmt: skip
    """An IP-Adapter reading ViT-H for the tiny UNet (SD1.5: ``INNER``) or the tiny SDXL-width UNet
    (``SDXL_INNER``): base (the ``embed``-wide image embeds, 4 tokens: 1024 ViT-H, 1280 ViT-bigG as
    ip-adapter_sdxl) or plus (the 1280-wide hidden states, 16 tokens; SDXL's resampler is 1280 wide
    with 20 heads, as h94's); ``inners``: another UNet's cross-attention widths (:func:`inner_widths`);
    ``full``: the full-face MLP projection (SD1.5) instead."""
    gen = torch.Generator().manual_seed(seed)
    cross, default = (SDXL_CROSS, SDXL_INNER) if sdxl else (CROSS, INNER)
    inners = default if inners is None else inners
    if full:
        state = _mlp(gen)
    elif plus:
        state = _resampler(gen, 1280, dim=1280, out=cross, heads=20) if sdxl else _resampler(gen, 1280)
    else:
        state = _linear_proj(gen, embed, 4, cross)
    for i, inner in enumerate(inners):
        n = 2 * i + 1
        state[f"ip_adapter.{n}.to_k_ip.weight"] = _w(gen, inner, cross)
        state[f"ip_adapter.{n}.to_v_ip.weight"] = _w(gen, inner, cross)
    return write_tensors(path, state)


def diffusers_state(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The file split as diffusers' ``load_ip_adapter`` splits a safetensors IP-Adapter."""
    flat = load_file(str(path))
    out: dict[str, dict[str, torch.Tensor]] = {"image_proj": {}, "ip_adapter": {}}
    for key, value in flat.items():
        head, rest = key.split(".", 1)
        out[head][rest] = value
    return out


def unet_pair(seed: int = 2) -> tuple[Any, UNetModel]:
    """diffusers' UNet2DConditionModel (randomized) and Loadout's UNet with its weights."""
    import diffusers

    torch.manual_seed(0)
    hf = diffusers.UNet2DConditionModel(
        sample_size=8, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **_blocks()
    )
    randomize(hf, seed)
    ours = UNetModel(UNET).eval()
    ours.load_state_dict(unet_diffusers_to_original(hf.state_dict(), UNET), strict=True)
    return hf.eval(), ours


def sdxl_unet_pair(seed: int = 13, *, sized: bool = False) -> tuple[Any, UNetModel]:
    """An SDXL-width UNet (2048-wide context, two transformer blocks per attention, linear
    projections) in diffusers and in Loadout; ``sized``: with SDXL's class vector (pooled text and
    size embeddings, ``text_time``) as a whole pipeline needs, else none (the adapter does not see it)."""
    import diffusers

    config = sdxl_unet_config(SDXL_ADM if sized else None)
    extra: dict[str, Any] = {}
    if sized:
        extra = {"addition_embed_type": "text_time", "addition_time_embed_dim": 256,
                 "projection_class_embeddings_input_dim": SDXL_ADM}  # fmt: skip

    torch.manual_seed(0)
    hf = diffusers.UNet2DConditionModel(
        sample_size=8, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=SDXL_CROSS, attention_head_dim=(2, 4), transformer_layers_per_block=(1, 2),
        use_linear_projection=True, **extra,
    )  # fmt: skip
    randomize(hf, seed)
    ours = UNetModel(config).eval()
    ours.load_state_dict(unet_diffusers_to_original(hf.state_dict(), config), strict=True)
    return hf.eval(), ours


def inner_widths(unet: UNetModel) -> tuple[int, ...]:
    """The inner width of each cross-attention of ``unet`` in the adapter's order."""
    from core.archs.ip_adapter.sites import cross_attention_order

    widths = []
    for site, layer in cross_attention_order(unet):
        blocks = [unet.middle_block] if site.stage == "middle" else getattr(unet, f"{site.stage}_blocks")
        block = blocks[0 if site.stage == "middle" else site.index]
        attn = [m for n, m in block.named_modules() if n.endswith("attn2")][layer]
        widths.append(int(attn.to_k.weight.shape[0]))
    return tuple(widths)


def layout_unet_pair(sdxl: bool, seed: int) -> tuple[Any, UNetModel]:
    """A few-channel UNet with the real block layout, so the transformers number as on the real
    model (ComfyUI's ``transformer_index``: SD1.5 16, SDXL 11), at the real context width (768 /
    2048; SDXL with its class vector and linear projections), one transformer block each; in
    diffusers and in Loadout."""
    import diffusers

    if sdxl:
        config = UNetConfig.per_level(
            model_channels=32, channel_mult=(1, 2, 2), num_res_blocks=2, level_depth=(0, 1, 1),
            transformer_depth_middle=1, context_dim=SDXL_CROSS, num_head_channels=16,
            use_linear_in_transformer=True, adm_in_channels=SDXL_ADM,
        )  # fmt: skip
        blocks: dict[str, Any] = {
            "block_out_channels": (32, 64, 64), "attention_head_dim": (2, 4, 4),
            "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
            "cross_attention_dim": SDXL_CROSS, "use_linear_projection": True,
            "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
            "projection_class_embeddings_input_dim": SDXL_ADM,
        }  # fmt: skip
    else:
        config = UNetConfig.per_level(
            model_channels=32, channel_mult=(1, 1, 2, 2), num_res_blocks=2, level_depth=(1, 1, 1, 0),
            transformer_depth_middle=1, context_dim=CROSS, num_heads=8, num_head_channels=None,
        )  # fmt: skip
        blocks = {
            "block_out_channels": (32, 32, 64, 64), "attention_head_dim": 8, "cross_attention_dim": CROSS,
            "down_block_types": ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
            "up_block_types": ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        }  # fmt: skip
    torch.manual_seed(0)
    hf = diffusers.UNet2DConditionModel(sample_size=8, layers_per_block=2, **blocks)
    randomize(hf, seed)
    ours = UNetModel(config).eval()
    ours.load_state_dict(unet_diffusers_to_original(hf.state_dict(), config), strict=True)
    return hf.eval(), ours
