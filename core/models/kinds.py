"""Which diffusion network a module is, in the words the callers branch on."""

from __future__ import annotations

from torch import nn

from core.errors import ModelMismatchError
from core.models.chroma import Chroma
from core.models.flux import Flux
from core.models.mmdit import MMDiT
from core.models.nextdit import NextDiT
from core.models.pixart import PixArt
from core.models.unet import UNetModel


def network_kind(model: nn.Module, *, action: str = "generate with") -> str:
    """ "unet", "mmdit", "flux", "chroma", "pixart" or "nextdit" (Chroma is checked before the Flux it
    resembles)."""
    if isinstance(model, UNetModel):
        return "unet"
    if isinstance(model, MMDiT):
        return "mmdit"
    if isinstance(model, PixArt):
        return "pixart"
    if isinstance(model, NextDiT):
        return "nextdit"
    if isinstance(model, Chroma):
        return "chroma"
    if isinstance(model, Flux):
        return "flux"
    raise ModelMismatchError(
        f"Loadout cannot {action} a {type(model).__name__}",
        why="that needs a diffusion model of a supported family",
        fix="Load an SD1/SD2/SDXL/SD3/Flux/Chroma/PixArt/Lumina 2/Z-Image checkpoint or diffusion model",
        code="wrong_kind",
    )
