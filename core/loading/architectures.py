"""Which network each family is, and how a file's keys become that network's keys.

One :class:`~core.archs.layouts.Architecture` per network, covering the families that share it:
the diffusion networks', the VAE's and the text encoders' (CLIP, T5, the decoder LLMs) come from
their architecture packages (``core/archs``, through the catalog). Conversions are
functions over a *mapping of tensors*: the same code converts real memory-mapped tensors when
loading and meta tensors (shapes only, no data) for ``loadout check``.
"""

from __future__ import annotations

from core.archs.catalog import CODECS, ENCODER_ARCHITECTURES, NETS
from core.archs.layouts import Architecture, Converter, Shapes, Tensors

__all__ = [
    "ARCHITECTURES",
    "CLIP",
    "T5",
    "Architecture",
    "Converter",
    "Shapes",
    "Tensors",
    "architecture_for",
    "loadable_families",
]


def __getattr__(name: str) -> Architecture:
    """``UNET``, ``FLUX``, ``VAE`` ...: a network's (or the KL-VAE codec's) architecture by the
    upper-case name older callers import (new code asks ``NETS[id].architecture``)."""
    key = name.lower()
    if key in NETS:
        return NETS[key].architecture
    if name == "VAE":
        return CODECS["kl-vae"].architecture
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: the text encoders' records, from their packages (core/archs/clip_text, t5_text, llm)
_ENCODERS = {a.name: a for a in ENCODER_ARCHITECTURES}
CLIP = _ENCODERS["clip-text"]
T5 = _ENCODERS["t5-encoder"]

ARCHITECTURES: tuple[Architecture, ...] = (
    *(n.architecture for n in NETS),
    *(c.architecture for c in CODECS),
    *ENCODER_ARCHITECTURES,
)
_BY_FAMILY: dict[str, Architecture] = {f: a for a in ARCHITECTURES for f in a.families}


def architecture_for(family: str) -> Architecture | None:
    return _BY_FAMILY.get(family)


def loadable_families() -> tuple[str, ...]:
    return tuple(_BY_FAMILY)
