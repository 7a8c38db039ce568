"""Upscale model files (ESRGAN, RealESRGAN, SwinIR, HAT, DAT, Compact, SPAN, ...) read with spandrel,
as ComfyUI's UpscaleModelLoader reads them.

The tensors come through Loadout's own readers (validated safetensors headers; pickles only
through the restricted unpickler and ``torch.load(weights_only=True)``); spandrel detects the
architecture from the keys and shapes and builds the network. Its plain torch layers are then
turned into Loadout's cast-at-forward op layers (the same classes, with the same weights), so the
memory manager can place the model whole, partly or streamed like any other, and a placed model
computes the same bits as one in RAM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core import ops
from core.errors import FileFormatError, ModelMismatchError
from core.files.model_file import read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict
from core.files.safetensors import SafetensorsFile
from core.upscale.arches import registry

#: torch layer class -> Loadout's op layer of the same class (exact classes only: a subclass with
#: its own forward is left as it is)
_OPS: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: ops.Linear,
    nn.Conv1d: ops.Conv1d,
    nn.Conv2d: ops.Conv2d,
    nn.Conv3d: ops.Conv3d,
    nn.ConvTranspose2d: ops.ConvTranspose2d,
    nn.GroupNorm: ops.GroupNorm,
    nn.LayerNorm: ops.LayerNorm,
}


@dataclass
class UpscaleModel:
    """A loaded upscale model: spandrel's descriptor (which pads a tile to the sizes the network
    accepts and clamps its output to [0, 1]) and facts about it."""

    path: Path
    descriptor: Any  # spandrel.ImageModelDescriptor
    architecture: str
    scale: int
    input_channels: int
    output_channels: int

    @property
    def module(self) -> nn.Module:
        module: nn.Module = self.descriptor.model
        return module

    @property
    def name(self) -> str:
        return self.path.stem

    def __call__(self, tile: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.descriptor(tile)
        return out


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors or pickle file (validated; a pickle only through the safe path)."""
    index = read_tensor_index(path)
    if index.format == "safetensors":
        with SafetensorsFile(path, header=index.header) as f:
            return {k: f.tensor(k) for k in f}
    if index.format == "pickle":
        return load_pickle_state_dict(path)
    raise FileFormatError(
        f"{path.name} is a {index.format} file, not an upscale model",
        why="upscale models come as .safetensors or .pth files",
        fix="Use the model's .pth or .safetensors file",
        code="wrong_kind",
    )


def to_op_layers(module: nn.Module) -> int:
    """Turn ``module``'s plain torch layers into Loadout's op layers in place (the class changes,
    the weights stay); returns how many were turned."""
    turned = 0
    for layer in module.modules():
        op = _OPS.get(type(layer))
        if op is not None:
            layer.__class__ = op
            turned += 1
    return turned


def load_upscale_model(path: Path) -> UpscaleModel:
    """Read ``path`` and build its network (see the module notes)."""
    path = Path(path)
    state = read_state_dict(path)
    if "module.layers.0.residual_group.blocks.0.norm1.weight" in state:  # SwinIR saved from DataParallel
        state = {k.removeprefix("module."): v for k, v in state.items()}
    try:
        from spandrel import ImageModelDescriptor, UnsupportedModelError
    except ImportError:  # the stand-in package names them after registry() built it
        registry()
        from spandrel import ImageModelDescriptor, UnsupportedModelError
    try:
        descriptor = registry().load(state)
    except UnsupportedModelError:
        raise ModelMismatchError(
            f"{path.name} is not an upscale model Loadout can read",
            why="spandrel, which reads upscale models for ComfyUI too, recognises no architecture in it",
            fix="Use an ESRGAN, RealESRGAN, SwinIR, HAT, DAT, Compact or SPAN model file",
            code="unsupported_upscale_model",
        ) from None
    except (KeyError, RuntimeError, ValueError) as exc:
        raise FileFormatError(
            f"{path.name} looks like an upscale model but its weights do not fit the network",
            why=" ".join(line.strip() for line in str(exc).splitlines()[:2])[:300],
            fix="Get the file again; it may be damaged or cut short",
            code="invalid_upscale_model",
        ) from None
    if not isinstance(descriptor, ImageModelDescriptor):
        raise ModelMismatchError(
            f"{path.name} is not a single-picture model",
            why=f"it is a {descriptor.architecture.name} model, which needs more than one picture in",
            fix="Use an upscale model (ESRGAN, SwinIR, ...)",
            code="unsupported_upscale_model",
        )
    module = descriptor.model
    module.eval()
    module.requires_grad_(False)
    to_op_layers(module)
    return UpscaleModel(
        path, descriptor, descriptor.architecture.name, int(descriptor.scale),
        int(descriptor.input_channels), int(descriptor.output_channels),
    )  # fmt: skip
