"""An upscale model run through a :class:`~core.session.placement.Placement`: the memory manager
places it (whole, partly, or streamed on a small card; every decision an event, the model named
"<file> upscale model") with room for a tile's activations, then the tiles run on its device."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from core.memory.manager import NotEnoughMemoryError
from core.ops.layers import CastWeights
from core.session.placement import Placement
from core.upscale.model import UpscaleModel
from core.upscale.tiled import OVERLAP, TILE, activation_bytes, upscale_pictures

ROLE = "upscale_model"


def manager_name(model: UpscaleModel) -> str:
    return f"{model.name} upscale model"


def place_upscale_model(placement: Placement, model: UpscaleModel, height: int, width: int) -> torch.device:
    """Ask the manager for ``model`` with room for a tile of an ``height`` x ``width`` picture (or,
    when that much cannot be had, with none); returns the device to compute on (the CPU when
    nothing is placed)."""
    if not placement.active:
        return torch.device("cpu")
    placement.register(model.module, manager_name(model))
    fixed = placement.manager.settings.headroom_fixed  # the user fixed the headroom: it stands
    need = 0 if fixed else activation_bytes(model.scale, height, width)
    result = placement.place([model.module], need)
    if result.refused and need > 1:
        # the estimate is ComfyUI's generous rule of thumb, and ComfyUI runs on when it cannot free
        # that much: place what fits with no room kept, and let the tiles halve if the device runs out
        result = placement.place([model.module], 1)
    if result.refused:
        raise NotEnoughMemoryError(
            f"not enough memory on {placement.describe().label} to upscale",
            why=result.refused[0],
            fix="Upscale a smaller picture, or free memory: offload or unload other models",
        )
    device = torch.device(placement.manager.device)
    stranded = loose_off_device(model.module, device)
    if stranded:
        raise NotEnoughMemoryError(
            f"{model.name} could not be placed on {placement.describe().label}",
            why=f"{stranded[0]} (a {model.architecture} weight outside its convolutions and linear "
            "layers, which cannot stream) was left in system memory",
            fix="Free memory on the device (unload other models), or upscale on the CPU",
        )
    return device


def loose_off_device(module: nn.Module, device: torch.device) -> list[str]:
    """Weights that will not be on ``device`` when the model runs: outside Loadout's op layers
    (which stream when not resident) and not placed. ESRGAN-family models have none; a PReLU's
    slope or SwinIR's position tables are such weights."""
    out = []
    for name, layer in module.named_modules():
        if isinstance(layer, CastWeights) and layer.stream is not None:
            continue
        for key, t in [*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)]:
            if t.device.type != device.type:
                out.append(f"{name}.{key}" if name else key)
    return out


def run_upscale(
    placement: Placement,
    model: UpscaleModel,
    pictures: Tensor,
    *,
    check: Callable[[], None] = lambda: None,
    progress: Callable[[int, int], None] = lambda done, total: None,
    tile: int = TILE,
    overlap: int = OVERLAP,
) -> Tensor:
    """Pictures [B, C, H, W] in [0, 1] -> the model's upscaled pictures (float32, CPU, in [0, 1])."""
    device = place_upscale_model(placement, model, pictures.shape[2], pictures.shape[3])
    return upscale_pictures(
        model, pictures, scale=model.scale, out_channels=model.output_channels, device=device,
        check=check, progress=progress, tile=tile, overlap=overlap,
    )  # fmt: skip
