"""A tiny diffusers ControlNetModel and UNet2DConditionModel (random weights) with the same sizes,
and files of the ControlNet in both release layouts, for the ControlNet parity tests.

The width stays 768 (SD1's cross-attention width, 8 heads) so that ``inspect`` recognises the
files as SD1 ControlNets and they load through the public loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from core.loading.controlnet import controlnet_key_map
from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.models.controlnet import ControlNetConfig
from core.models.unet import UNetConfig, UNetModel
from tests.core.generate.reference import randomize
from tests.fixtures.st_files import write_tensors

WIDTH = 768
UNET = UNetConfig(
    in_channels=4, out_channels=4, model_channels=32, channel_mult=(1, 2), num_res_blocks=(1, 1),
    transformer_depth=(1, 0), transformer_depth_middle=1, transformer_depth_output=(0, 0, 1, 1),
    context_dim=WIDTH, num_heads=8, num_head_channels=None,
)  # fmt: skip
CONTROL = ControlNetConfig(UNET)


def _blocks() -> dict[str, Any]:
    return {
        "block_out_channels": (32, 64),
        "layers_per_block": 1,
        "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "cross_attention_dim": WIDTH,
        "attention_head_dim": 8,
    }


def diffusers_pair(seed: int) -> tuple[Any, Any]:
    """(ControlNetModel, UNet2DConditionModel) of diffusers, randomized."""
    import diffusers

    torch.manual_seed(0)
    cn = diffusers.ControlNetModel(in_channels=4, **_blocks())
    randomize(cn, seed)
    unet = diffusers.UNet2DConditionModel(
        sample_size=8, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **_blocks()
    )
    randomize(unet, seed + 1)
    return cn.eval(), unet.eval()


def our_unet(hf_unet: Any) -> UNetModel:
    unet = UNetModel(UNET).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), UNET), strict=True)
    return unet


def controlnet_files(hf_cn: Any, folder: Path) -> tuple[Path, Path]:
    """The ControlNet as diffusers saves it and in lllyasviel's original layout (``control_model.``)."""
    state = {k: v.detach().clone() for k, v in hf_cn.state_dict().items()}
    diffusers_file = write_tensors(folder / "control_diffusers.safetensors", state)
    key_map = controlnet_key_map(CONTROL)
    original = {"control_model." + key_map[k]: v for k, v in state.items()}
    original_file = write_tensors(folder / "control_sd15_original.safetensors", original)
    return diffusers_file, original_file
