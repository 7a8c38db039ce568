"""Header-only detection of diffusion models and ControlNets.

``match_diffusion`` asks every diffusion family of the registry about a (prefix-stripped) view and
returns the verdicts best first. ``match_controlnet`` reads the ControlNets built on SD1/SD2/SDXL
(original and diffusers layouts), Flux (XLabs and diffusers/InstantX), SD3, Qwen-Image (InstantX,
DiffSynth's blockwise nets) and Z-Image (Fun, in :mod:`.controlnet_nextdit`), and names the
diffusion family each one is for.
A ControlNet is never taken for a diffusion model: both have a UNet's input side, so every
diffusion rule refuses a view with ControlNet-only keys.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from core.detect.catalog import REGISTRY
from core.detect.controlnet_nextdit import z_image_controlnet
from core.detect.diffusion_probe import count_numbered, finish, is_controlnet
from core.detect.diffusion_unet import read_diffusers_input_side, read_ldm_input_side
from core.detect.keyview import KeyView
from core.detect.registry import Match, Registry

__all__ = ["match_controlnet", "match_diffusion"]


def match_diffusion(view: KeyView, registry: Registry | None = None) -> list[Match]:
    """Every diffusion family whose rule accepts ``view``, best first; empty when none does.

    ``view`` is already stripped of any checkpoint prefix (``model.diffusion_model.``). It is only
    read, never changed.
    """
    if is_controlnet(view):
        return []
    return (registry or REGISTRY).match(view, "diffusion")


def _unet_base(context_dim: int | None, adm: int | None) -> str | None:
    """The UNet family a ControlNet's widths belong to (its depths may be cut down: small/mid SDXL nets)."""
    if adm == 2816:
        return "sdxl"
    if adm == 2560 or context_dim == 1280:
        return "sdxl-refiner"
    return {768: "sd1", 1024: "sd2"}.get(context_dim or 0)


def _unet_controlnet(view: KeyView) -> Match | None:
    if "input_blocks.0.0.weight" in view and view.has_any(
        ("input_hint_block.0.weight", "zero_convs.0.0.weight")
    ):
        shape, layout, hint_key = read_ldm_input_side(view), "original", "input_hint_block.0.weight"
        probes = (
            "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight",
            "input_blocks.1.0.in_layers.2.weight",
        )
        blocks = count_numbered(view, "zero_convs.", ("0.weight",))
    elif "controlnet_cond_embedding.conv_in.weight" in view and "conv_in.weight" in view:
        shape, layout, hint_key = (
            read_diffusers_input_side(view),
            "diffusers",
            "controlnet_cond_embedding.conv_in.weight",
        )
        probes = (
            "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight",
            "down_blocks.0.resnets.0.conv1.weight",
        )
        blocks = count_numbered(view, "controlnet_down_blocks.", ("weight",))
    else:
        return None
    if shape is None:
        return None
    family = _unet_base(shape.context_dim, shape.adm_in_channels)
    if family is None:
        return None
    fields: dict[str, Any] = asdict(shape)
    fields.update(hint_channels=view.dim(hint_key, 1), controlnet_blocks=blocks)
    return finish(view, family, layout=layout, probes=probes, fields=fields)


def _flux_controlnet(view: KeyView) -> Match | None:
    if "controlnet_blocks.0.weight" not in view:
        return None
    if "double_blocks.0.img_attn.qkv.weight" in view:  # XLabs
        layout, guidance = "original", "guidance_in.in_layer.weight"
        depth = count_numbered(view, "double_blocks.", ("img_attn.qkv.weight",))
        single = count_numbered(view, "single_blocks.", ("linear1.weight",))
        probes: tuple[str, ...] = ("double_blocks.0.img_attn.qkv.weight",)
    elif (
        "x_embedder.weight" in view and "transformer_blocks.0.attn.add_q_proj.weight" in view
    ):  # diffusers/InstantX
        layout, guidance = "diffusers", "time_text_embed.guidance_embedder.linear_1.weight"
        depth = count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",))
        single = count_numbered(view, "single_transformer_blocks.", ("attn.to_q.weight",))
        probes = ("transformer_blocks.0.attn.to_q.weight",)
    else:
        return None
    fields = {
        "depth": depth,
        "depth_single_blocks": single,
        "controlnet_blocks": count_numbered(view, "controlnet_blocks.", ("weight",)),
        "controlnet_single_blocks": count_numbered(view, "controlnet_single_blocks.", ("weight",)),
        "guidance_embed": guidance in view,
        "union": "controlnet_mode_embedder.weight" in view,
    }
    family = "flux-dev" if fields["guidance_embed"] else "flux-schnell"
    # Alimama's inpainting net: the hint embedder takes a mask's 2x2 patch beside the latent's
    wider = (view.dim("controlnet_x_embedder.weight", 1) or 0) > (view.dim("x_embedder.weight", 1) or 0)
    variant = "inpaint" if layout == "diffusers" and wider else None
    return finish(view, family, layout=layout, probes=probes, fields=fields, variant=variant)


def _sd3_controlnet(view: KeyView) -> Match | None:
    """Stability's SD3.5 ControlNets (``original``: picture-only blocks named as the MMDiT's, ComfyUI's
    ``load_controlnet_sd35``), diffusers' joint-block ``SD3ControlNetModel`` (``diffusers``:
    InstantX, alimama) and diffusers' conversion of Stability's (``diffusers-sd3.5``: no loader)."""
    if "controlnet_blocks.0.weight" not in view or "pos_embed_input.proj.weight" not in view:
        return None
    hidden = view.dim("pos_embed_input.proj.weight", 0) or 0
    warnings: list[str] = []
    if "transformer_blocks.0.adaLN_modulation.1.bias" in view:
        layout, probes = "original", ("transformer_blocks.0.attn.qkv.weight",)
        blocks = count_numbered(view, "transformer_blocks.", ("attn.qkv.weight",))
        family = "sd3.5-large" if hidden == 2432 else "sd3.5-medium"
    else:
        probes = ("transformer_blocks.0.attn.to_q.weight",)
        blocks = count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",))
        layout = "diffusers" if "context_embedder.weight" in view else "diffusers-sd3.5"
        if hidden == 2432:
            family = "sd3.5-large"
        elif "transformer_blocks.0.attn.norm_q.weight" in view:
            family = "sd3.5-medium"  # SD3.5's q/k norms
        else:
            family = "sd3"
            warnings.append("SD3 medium and SD3.5 medium ControlNets have the same width")
    fields = {
        "hidden_size": hidden,
        "num_layers": blocks,
        "controlnet_blocks": count_numbered(view, "controlnet_blocks.", ("weight",)),
        "hint_channels": view.dim("pos_embed_input.proj.weight", 1),
    }
    return finish(view, family, layout=layout, probes=probes, fields=fields, warnings=warnings)


def _qwen_controlnet(view: KeyView) -> Match | None:
    """InstantX's Qwen-Image ControlNets (diffusers' ``QwenImageControlNetModel`` names): the union
    net, and the inpainting one whose hint embedder takes a mask's 2x2 patch beside the latent's."""
    if "controlnet_x_embedder.weight" not in view or not view.has_all(("img_in.weight", "txt_norm.weight")):
        return None
    packed = view.dim("img_in.weight", 1) or 0
    extra = (view.dim("controlnet_x_embedder.weight", 1) or 0) - packed
    fields = {
        "hidden_size": view.dim("img_in.weight", 0) or 0,
        "num_layers": count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",)),
        "controlnet_blocks": count_numbered(view, "controlnet_blocks.", ("weight",)),
        "extra_condition_channels": extra,
    }
    probes = ("transformer_blocks.0.attn.to_q.weight",)
    variant = "inpaint" if extra > 0 else None
    return finish(view, "qwen-image", layout="diffusers", probes=probes, fields=fields, variant=variant)


def _qwen_blockwise(view: KeyView) -> Match | None:
    """DiffSynth-Studio's blockwise Qwen-Image ControlNets (canny, depth, inpaint: ComfyUI's model
    patches, marked by ``controlnet_blocks.0.y_rms.weight``): the inpainting net's hint projection
    takes a mask's 2x2 patch beside the latent's."""
    if "controlnet_blocks.0.y_rms.weight" not in view or "img_in.weight" not in view:
        return None
    extra = (view.dim("img_in.weight", 1) or 0) - 64
    fields = {
        "hidden_size": view.dim("img_in.weight", 0) or 0,
        "controlnet_blocks": count_numbered(view, "controlnet_blocks.", ("input_proj.weight",)),
        "extra_condition_channels": extra,
    }
    probes = ("controlnet_blocks.0.input_proj.weight",)
    variant = "inpaint" if extra > 0 else None
    return finish(view, "qwen-image", layout="blockwise", probes=probes, fields=fields, variant=variant)


def match_controlnet(view: KeyView) -> Match | None:
    """The ControlNet in ``view`` with ``family`` = the diffusion family it is for, or None."""
    if view.has_any(("control_model.zero_convs.0.0.weight", "control_model.input_blocks.0.0.weight")):
        view = view.sub("control_model.")
    dits = (_qwen_controlnet, _qwen_blockwise, z_image_controlnet)
    for read in (_unet_controlnet, _flux_controlnet, _sd3_controlnet, *dits):
        found = read(view)
        if found is not None:
            return found
    return None
