"""diffusers ``AutoencoderKL`` keys -> original LDM layout (``core.models.vae.AutoencoderKL``).

diffusers names levels ``down_blocks.N`` / ``up_blocks.N`` (the decoder's counted from the deepest
level, the original's from the shallowest), resnets ``resnets.M`` with ``conv_shortcut``, the mid
attention ``to_q/to_k/to_v/to_out.0`` as Linear layers ([C, C] weights where the original has 1x1
convolutions, [C, C, 1, 1]). Older diffusers files call them ``query/key/value/proj_attn``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.errors import ModelMismatchError
from core.models.vae import VAEConfig

_PARAMS = ("weight", "bias")
_RESNET = (("norm1", "norm1"), ("conv1", "conv1"), ("norm2", "norm2"), ("conv2", "conv2"))
_ATTN = (("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out"))
_LEGACY_ATTN = (("query", "to_q"), ("key", "to_k"), ("value", "to_v"), ("proj_attn", "to_out.0"))
_ATTN_MATRICES = ("q", "k", "v", "proj_out")


def _layer(out: dict[str, str], diffusers: str, original: str) -> None:
    for p in _PARAMS:
        out[f"{diffusers}.{p}"] = f"{original}.{p}"


def _resnet(out: dict[str, str], diffusers: str, original: str, shortcut: bool) -> None:
    for d, o in _RESNET:
        _layer(out, f"{diffusers}.{d}", f"{original}.{o}")
    if shortcut:
        _layer(out, f"{diffusers}.conv_shortcut", f"{original}.nin_shortcut")


def _mid(out: dict[str, str], side: str) -> None:
    _resnet(out, f"{side}.mid_block.resnets.0", f"{side}.mid.block_1", False)
    _resnet(out, f"{side}.mid_block.resnets.1", f"{side}.mid.block_2", False)
    for d, o in _ATTN:
        _layer(out, f"{side}.mid_block.attentions.0.{d}", f"{side}.mid.attn_1.{o}")


def vae_original_key_map(config: VAEConfig) -> dict[str, str]:
    """Every tensor of a diffusers AutoencoderKL for ``config``: ``{diffusers key: original key}``."""
    out: dict[str, str] = {}
    widths = config.level_channels
    last = len(widths) - 1
    _layer(out, "encoder.conv_in", "encoder.conv_in")
    cin = widths[0]
    for i, w in enumerate(widths):
        for j in range(config.num_res_blocks):
            src = cin if j == 0 else w
            _resnet(out, f"encoder.down_blocks.{i}.resnets.{j}", f"encoder.down.{i}.block.{j}", src != w)
        if i != last:
            _layer(out, f"encoder.down_blocks.{i}.downsamplers.0.conv", f"encoder.down.{i}.downsample.conv")
        cin = w
    _mid(out, "encoder")
    _layer(out, "encoder.conv_norm_out", "encoder.norm_out")
    _layer(out, "encoder.conv_out", "encoder.conv_out")

    _layer(out, "decoder.conv_in", "decoder.conv_in")
    _mid(out, "decoder")
    cin = widths[-1]
    for k, i in enumerate(reversed(range(len(widths)))):
        w = widths[i]
        for j in range(config.num_res_blocks + 1):
            src = cin if j == 0 else w
            _resnet(out, f"decoder.up_blocks.{k}.resnets.{j}", f"decoder.up.{i}.block.{j}", src != w)
        if i != 0:
            _layer(out, f"decoder.up_blocks.{k}.upsamplers.0.conv", f"decoder.up.{i}.upsample.conv")
        cin = w
    _layer(out, "decoder.conv_norm_out", "decoder.norm_out")
    _layer(out, "decoder.conv_out", "decoder.conv_out")
    if config.use_quant_conv:
        _layer(out, "quant_conv", "quant_conv")
        _layer(out, "post_quant_conv", "post_quant_conv")
    return out


def _modern_name(key: str) -> str:
    """``...mid_block.attentions.0.query.weight`` (old diffusers) -> ``...attentions.0.to_q.weight``."""
    head, sep, tail = key.partition(".mid_block.attentions.0.")
    if not sep:
        return key
    for old, new in _LEGACY_ATTN:
        if tail.startswith(old + "."):
            return f"{head}{sep}{new}{tail[len(old) :]}"
    return key


def _as_original(original_key: str, t: torch.Tensor) -> torch.Tensor:
    name = original_key.rsplit(".", 2)
    if ".mid.attn_1." in original_key and name[-2] in _ATTN_MATRICES and name[-1] == "weight" and t.ndim == 2:
        return t.reshape(*t.shape, 1, 1)  # Linear [C, C] -> 1x1 conv [C, C, 1, 1]; a view, no copy
    return t


def _listing(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def vae_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: VAEConfig
) -> dict[str, torch.Tensor]:
    """Rename (and reshape the mid-attention weights of) a diffusers AutoencoderKL state dict.

    Raises ModelMismatchError listing the keys that have no place in ``config``'s architecture, and
    those the architecture needs that the state dict lacks.
    """
    key_map = vae_original_key_map(config)
    out: dict[str, torch.Tensor] = {}
    unmapped: list[str] = []
    for key, tensor in state_dict.items():
        original = key_map.get(_modern_name(key))
        if original is None or original in out:
            unmapped.append(key)
            continue
        out[original] = _as_original(original, tensor)
    missing = sorted(d for d, o in key_map.items() if o not in out)
    if unmapped or missing:
        problems = []
        if unmapped:
            problems.append(f"{len(unmapped)} unmapped: {_listing(sorted(unmapped))}")
        if missing:
            problems.append(f"{len(missing)} missing: {_listing(missing)}")
        raise ModelMismatchError(
            f"The diffusers VAE does not match a KL autoencoder with {config.latent_channels} latent "
            f"channels, levels {config.level_channels}, {config.num_res_blocks} resnets per level"
            f"{'' if config.use_quant_conv else ', no quant convs'}",
            why="; ".join(problems),
            fix="Strip any 'vae.' prefix first, and build the config from the file's own shapes",
        )
    return out
