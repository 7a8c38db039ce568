"""diffusers ``AutoencoderKLWan`` / ``AutoencoderKLQwenImage`` keys <-> the original (Wan, ComfyUI,
Comfy-Org file) layout of :class:`~core.archs.wan_vae.network.WanVAE`.

The two layouts hold the same tensors with the same shapes; only names differ:

==================================  =============================================================
original (ComfyUI)                  diffusers
==================================  =============================================================
``encoder.conv1``                   ``encoder.conv_in`` (``decoder`` alike)
``encoder.downsamples.N``           ``encoder.down_blocks.N`` (the same flat list)
``decoder.upsamples.N``             ``decoder.up_blocks.L.resnets.J`` / ``.upsamplers.0``
``...residual.{0,2,3,6}``           ``...{norm1.gamma, conv1, norm2.gamma, conv2}``
``...shortcut``                     ``...conv_shortcut``
``*.middle.{0,1,2}``                ``*.mid_block.{resnets.0, attentions.0, resnets.1}``
``*.head.0.gamma`` / ``*.head.2``   ``*.norm_out.gamma`` / ``*.conv_out``
``conv1`` / ``conv2``               ``quant_conv`` / ``post_quant_conv``
==================================  =============================================================

Resamples (``resample.1``, ``time_conv``) and the attention (``norm.gamma``, ``to_qkv``, ``proj``)
keep their names.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.wan_vae.network import WanVAEConfig
from core.errors import ModelMismatchError

StateDict = Mapping[str, torch.Tensor]

_PARAMS = ("weight", "bias")
#: a residual block's tensors: (diffusers suffix, original suffix)
_RESIDUAL = (
    ("norm1.gamma", "residual.0.gamma"),
    ("conv1.weight", "residual.2.weight"),
    ("conv1.bias", "residual.2.bias"),
    ("norm2.gamma", "residual.3.gamma"),
    ("conv2.weight", "residual.6.weight"),
    ("conv2.bias", "residual.6.bias"),
)
_SHORTCUT = (("conv_shortcut.weight", "shortcut.weight"), ("conv_shortcut.bias", "shortcut.bias"))
_ATTENTION = ("norm.gamma", "to_qkv.weight", "to_qkv.bias", "proj.weight", "proj.bias")


def _conv(out: dict[str, str], diffusers: str, original: str) -> None:
    for p in _PARAMS:
        out[f"{diffusers}.{p}"] = f"{original}.{p}"


def _residual(out: dict[str, str], diffusers: str, original: str, shortcut: bool) -> None:
    for d, o in (*_RESIDUAL, *(_SHORTCUT if shortcut else ())):
        out[f"{diffusers}.{d}"] = f"{original}.{o}"


def _resample(out: dict[str, str], diffusers: str, original: str, temporal: bool) -> None:
    _conv(out, f"{diffusers}.resample.1", f"{original}.resample.1")
    if temporal:
        _conv(out, f"{diffusers}.time_conv", f"{original}.time_conv")


def _middle_and_head(out: dict[str, str], side: str) -> None:
    _residual(out, f"{side}.mid_block.resnets.0", f"{side}.middle.0", False)
    for name in _ATTENTION:
        out[f"{side}.mid_block.attentions.0.{name}"] = f"{side}.middle.1.{name}"
    _residual(out, f"{side}.mid_block.resnets.1", f"{side}.middle.2", False)
    out[f"{side}.norm_out.gamma"] = f"{side}.head.0.gamma"
    _conv(out, f"{side}.conv_out", f"{side}.head.2")
    _conv(out, f"{side}.conv_in", f"{side}.conv1")


def wan_key_map(config: WanVAEConfig) -> dict[str, str]:
    """Every tensor of the VAE for ``config``: ``{diffusers key: original key}``."""
    out: dict[str, str] = {}
    levels = len(config.dim_mult)
    dims = config.encoder_dims
    n = 0
    for i in range(levels):
        for j in range(config.num_res_blocks):
            cin = dims[i] if j == 0 else dims[i + 1]
            _residual(out, f"encoder.down_blocks.{n}", f"encoder.downsamples.{n}", cin != dims[i + 1])
            n += 1
        if i != levels - 1:
            temporal = config.temporal_downsample[i]
            _resample(out, f"encoder.down_blocks.{n}", f"encoder.downsamples.{n}", temporal)
            n += 1
    _middle_and_head(out, "encoder")

    dec = config.decoder_dims
    temporal_up = tuple(reversed(config.temporal_downsample))
    n = 0
    for i in range(levels):
        cin = dec[i] // 2 if i > 0 else dec[i]
        for j in range(config.num_res_blocks + 1):
            src = cin if j == 0 else dec[i + 1]
            _residual(out, f"decoder.up_blocks.{i}.resnets.{j}", f"decoder.upsamples.{n}", src != dec[i + 1])
            n += 1
        if i != levels - 1:
            _resample(out, f"decoder.up_blocks.{i}.upsamplers.0", f"decoder.upsamples.{n}", temporal_up[i])
            n += 1
    _middle_and_head(out, "decoder")
    _conv(out, "quant_conv", "conv1")
    _conv(out, "post_quant_conv", "conv2")
    return out


# -- the config from a file's shapes -----------------------------------------------------------------

#: (encoder conv in, flat encoder list, residual marker, residual conv, resample conv, head conv,
#: post-quant conv) in each layout
_SHAPE_KEYS = {
    "original": ("encoder.conv1", "encoder.downsamples", "residual.0.gamma", "residual.2.weight",
                 "resample.1.weight", "decoder.head.2.weight", "conv2.weight"),
    "diffusers": ("encoder.conv_in", "encoder.down_blocks", "norm1.gamma", "conv1.weight",
                  "resample.1.weight", "decoder.conv_out.weight", "post_quant_conv.weight"),
}  # fmt: skip
#: present only in Wan 2.2's VAE, original layout (its decoder levels are blocks of their own)
_WAN22_MARKER = "decoder.upsamples.0.upsamples.0."


def _refuse(why: str) -> ModelMismatchError:
    return ModelMismatchError(
        "Not a Wan 2.1 / Qwen-Image VAE Loadout can build",
        why=why,
        fix="Use the Wan 2.1 VAE (wan_2.1_vae.safetensors) or Qwen-Image's (qwen_image_vae.safetensors)",
        code="layout_mismatch",
    )


def read_config(shapes: Mapping[str, tuple[int, ...]], layout: str = "original") -> WanVAEConfig:
    """The VAE's config from its tensors' shapes in ``layout`` (``original`` or ``diffusers``)."""
    conv_in, flat, marker, res_conv, resample, head, post = _SHAPE_KEYS[layout]
    rgb = shapes.get(f"{conv_in}.weight", (0, 0))[1]
    if any(k.startswith(_WAN22_MARKER) for k in shapes) or rgb == 12 or shapes.get(post, (0,))[0] == 48:
        raise _refuse("this is Wan 2.2's VAE (48 latent channels, 16x downscale), not supported yet")

    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise _refuse(f"{key!r} is missing")
        return tuple(shapes[key])

    enc_in, z_dim = need(f"{conv_in}.weight"), need(post)[0]
    base = enc_in[0]
    widths: list[int] = []  # the output width of each encoder level
    temporal: list[bool] = []
    blocks: list[int] = [0]
    n = 0
    while True:
        if f"{flat}.{n}.{marker}" in shapes:
            width = need(f"{flat}.{n}.{res_conv}")[0]
            if blocks[-1] == 0:
                widths.append(width)
            blocks[-1] += 1
        elif f"{flat}.{n}.{resample}" in shapes:
            temporal.append(any(k.startswith(f"{flat}.{n}.time_conv.") for k in shapes))
            blocks.append(0)
        else:
            break
        n += 1
    if not widths or blocks[-1] == 0 or len(set(blocks)) != 1 or any(w % base for w in widths):
        raise _refuse(f"encoder levels of {widths} channels with {blocks} residual blocks (base {base})")
    return WanVAEConfig(
        base_dim=base,
        z_dim=z_dim,
        dim_mult=tuple(w // base for w in widths),
        num_res_blocks=blocks[0],
        temporal_downsample=tuple(temporal),
        in_channels=enc_in[1],
        out_channels=need(head)[0],
    )


def _listing(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def _rename(
    tensors: Mapping[str, torch.Tensor], names: Mapping[str, str], source: str
) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    unmapped: list[str] = []
    for key, tensor in tensors.items():
        new = names.get(key)
        if new is None:
            unmapped.append(key)
        else:
            out[new] = tensor
    missing = sorted(k for k in names if k not in tensors)
    if unmapped or missing:
        problems = []
        if unmapped:
            problems.append(f"{len(unmapped)} unmapped: {_listing(sorted(unmapped))}")
        if missing:
            problems.append(f"{len(missing)} missing: {_listing(missing)}")
        raise ModelMismatchError(
            f"The {source} Wan VAE does not have the tensors of a Wan 2.1 VAE",
            why="; ".join(problems),
            fix="The file may be damaged or a different VAE: run `loadout check` on it, or get it again",
            code="layout_mismatch",
        )
    return out


def diffusers_to_original(tensors: StateDict, config: WanVAEConfig) -> dict[str, torch.Tensor]:
    """Rename a diffusers Wan / Qwen-Image VAE state dict to the original layout (no copies)."""
    return _rename(tensors, wan_key_map(config), "diffusers")


def original_to_diffusers(tensors: StateDict, config: WanVAEConfig) -> dict[str, torch.Tensor]:
    """The inverse: an original-layout state dict under diffusers' names."""
    return _rename(tensors, {o: d for d, o in wan_key_map(config).items()}, "original")
