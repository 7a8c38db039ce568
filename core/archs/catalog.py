"""The three registries, built explicitly from the architecture packages (nothing registers itself
on import), and how the rest of the engine finds a family's parts.

Adding an architecture: its package exports ``NET`` (a :class:`~core.archs.protocols.DiffusionNet`)
and ``CONVENTIONS`` (its :class:`~core.archs.protocols.TextConvention` objects), or ``CODEC``; one
line below lists it. A family record (``core/detect/diffusion_families.py``) names the ids.
"""

from __future__ import annotations

from torch import nn

from core.archs import chroma, flux, kl_vae, mmdit, nextdit, pixart, unet
from core.archs.protocols import DiffusionNet, LatentCodec, TextConvention
from core.archs.registry import Registry
from core.detect.catalog import diffusion_spec
from core.errors import ModelMismatchError

_PACKAGES = (unet, mmdit, flux, chroma, pixart, nextdit)

NETS: Registry[DiffusionNet] = Registry("diffusion network", (p.NET for p in _PACKAGES))
TEXTS: Registry[TextConvention] = Registry("text convention", (c for p in _PACKAGES for c in p.CONVENTIONS))
CODECS: Registry[LatentCodec] = Registry("latent codec", (kl_vae.CODEC,))


def net_for(family: str) -> DiffusionNet:
    """The network a generating family's record names (refused in words for one that cannot)."""
    spec = diffusion_spec(family)
    assert spec.network is not None
    return NETS[spec.network]


def text_for(family: str) -> TextConvention:
    spec = diffusion_spec(family)
    assert spec.text is not None
    return TEXTS[spec.text]


def codec_for(family: str) -> LatentCodec:
    return CODECS[diffusion_spec(family).codec]


def net_of(module: nn.Module, *, action: str = "generate with") -> DiffusionNet:
    """The network ``module`` is (a loaded diffusion model), or a refusal naming what it is."""
    for net in NETS:
        if net.owns(module):
            return net
    raise ModelMismatchError(
        f"Loadout cannot {action} a {type(module).__name__}",
        why="that needs a diffusion model of a supported family",
        fix="Load an SD1/SD2/SDXL/SD3/Flux/Chroma/PixArt/Lumina 2/Z-Image checkpoint or diffusion model",
        code="wrong_kind",
    )


def codec_of(module: nn.Module) -> LatentCodec | None:
    """The codec that works ``module`` (a loaded VAE), or None."""
    return next((c for c in CODECS if c.owns(module)), None)
