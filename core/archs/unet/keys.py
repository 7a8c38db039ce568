"""diffusers ``UNet2DConditionModel`` key names -> the original (LDM/SGM) UNet layout.

A pure renaming: no tensor is touched, so the map also works on headers (shapes only).
``down_blocks.L.resnets.I`` is the I-th ResBlock of level L on the input side,
``up_blocks.U`` is level ``levels - 1 - U`` on the output side, ``mid_block`` is ``middle_block``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from core.errors import ModelMismatchError
from core.models.unet_config import DownStage, ResStage, UNetConfig

T = TypeVar("T")

_WB = ("weight", "bias")

_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
}
_TRANSFORMER_BLOCK = (
    *(f"{n}.{p}" for n in ("norm1", "norm2", "norm3", "ff.net.0.proj", "ff.net.2") for p in _WB),
    *(f"{a}.{x}.weight" for a in ("attn1", "attn2") for x in ("to_q", "to_k", "to_v")),
    *(f"{a}.to_out.0.{p}" for a in ("attn1", "attn2") for p in _WB),
)
_BASIC = {
    "conv_in": "input_blocks.0.0",
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}
_ADM = {"add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}
_ADM_ALIAS = "class_embedding."
"""SD2-unCLIP style files name the same MLP ``class_embedding``."""


def _weights(out: dict[str, str], src: str, dst: str) -> None:
    for p in _WB:
        out[f"{src}.{p}"] = f"{dst}.{p}"


def _resnet(out: dict[str, str], src: str, dst: str, stage: ResStage) -> None:
    for a, b in _RESNET.items():
        _weights(out, f"{src}.{a}", f"{dst}.{b}")
    if stage.in_channels != stage.out_channels:
        _weights(out, f"{src}.conv_shortcut", f"{dst}.skip_connection")


def _transformer(out: dict[str, str], src: str, dst: str, depth: int) -> None:
    for name in ("norm", "proj_in", "proj_out"):
        _weights(out, f"{src}.{name}", f"{dst}.{name}")
    for t in range(depth):
        for k in _TRANSFORMER_BLOCK:
            out[f"{src}.transformer_blocks.{t}.{k}"] = f"{dst}.transformer_blocks.{t}.{k}"


def unet_original_key_map(config: UNetConfig) -> dict[str, str]:
    """diffusers name -> original name, for every tensor of a UNet with ``config``."""
    out: dict[str, str] = {}
    for a, b in (_BASIC | (_ADM if config.adm_in_channels is not None else {})).items():
        _weights(out, a, b)
    for n, stage in enumerate(config.input_stages(), start=1):
        if isinstance(stage, DownStage):
            _weights(out, f"down_blocks.{stage.level}.downsamplers.0.conv", f"input_blocks.{n}.0.op")
            continue
        src = f"down_blocks.{stage.level}"
        _resnet(out, f"{src}.resnets.{stage.layer}", f"input_blocks.{n}.0", stage)
        if stage.transformer_depth:
            _transformer(
                out, f"{src}.attentions.{stage.layer}", f"input_blocks.{n}.1", stage.transformer_depth
            )
    mid = config.middle_channels
    mid_stage = ResStage(len(config.channel_mult) - 1, 0, mid, mid, 0)
    _resnet(out, "mid_block.resnets.0", "middle_block.0", mid_stage)
    if config.transformer_depth_middle is not None:
        _transformer(out, "mid_block.attentions.0", "middle_block.1", config.transformer_depth_middle)
        _resnet(out, "mid_block.resnets.1", "middle_block.2", mid_stage)
    levels = len(config.channel_mult)
    for n, stage in enumerate(config.output_stages()):
        src = f"up_blocks.{levels - 1 - stage.level}"
        _resnet(out, f"{src}.resnets.{stage.layer}", f"output_blocks.{n}.0", stage)
        if stage.transformer_depth:
            _transformer(
                out, f"{src}.attentions.{stage.layer}", f"output_blocks.{n}.1", stage.transformer_depth
            )
        if stage.upsample:
            slot = 2 if stage.transformer_depth else 1
            _weights(out, f"{src}.upsamplers.0.conv", f"output_blocks.{n}.{slot}.conv")
    return out


def _preview(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def unet_diffusers_to_original(state_dict: Mapping[str, T], config: UNetConfig) -> dict[str, T]:
    """The same tensors (or shapes: any value is carried over unchanged) under original names.

    Raises :class:`ModelMismatchError` listing the keys that do not belong to a UNet with
    ``config`` (unmapped) and the keys such a UNet needs that are absent (missing).
    """
    key_map = unet_original_key_map(config)
    alias = not any(k.startswith("add_embedding.") for k in state_dict)
    renamed = {
        ("add_embedding." + k.removeprefix(_ADM_ALIAS) if alias and k.startswith(_ADM_ALIAS) else k): k
        for k in state_dict
    }
    unmapped = sorted(renamed[k] for k in renamed if k not in key_map)
    missing = sorted(k for k in key_map if k not in renamed)
    if unmapped or missing:
        parts = []
        if unmapped:
            parts.append(f"{len(unmapped)} unmapped: {_preview(unmapped)}")
        if missing:
            parts.append(f"{len(missing)} missing: {_preview(missing)}")
        raise ModelMismatchError(
            "The diffusers UNet weights do not match the expected architecture (" + "; ".join(parts) + ")",
            why="every diffusers key must map to exactly one key of the configured UNet",
            fix="check that the config was read from this file (or pass the UNet's own config), "
            "and that the 'unet.' prefix is stripped",
        )
    return {key_map[k]: state_dict[src] for k, src in renamed.items()}
