"""Which network each family is, and how a file's keys become that network's keys.

One :class:`~core.archs.layouts.Architecture` per network, covering the families that share it:
the diffusion networks' and the VAE's come from their architecture packages (``core/archs``,
through the catalog's registries); the text encoders' (CLIP, T5) are here. Conversions are
functions over a *mapping of tensors*: the same code converts real memory-mapped tensors when
loading and meta tensors (shapes only, no data) for ``loadout check``.
"""

from __future__ import annotations

from core.archs.catalog import CODECS, ENCODER_ARCHITECTURES, NETS
from core.archs.layouts import Architecture, Converter, Shapes, Tensors
from core.loading.convert.open_clip import hf_to_open_clip, open_clip_to_hf
from core.models.clip import CLIPTextConfig, CLIPTextModel
from core.models.t5 import T5Config, T5Encoder

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


# --- Text encoders --------------------------------------------------------------------------------
_CLIP_LAYERS = {"clip-l": 12, "clip-h": 24, "clip-g": 32}


def _clip_layers(t: Tensors) -> int:
    n = 0
    while (
        f"transformer.resblocks.{n}.ln_1.weight" in t
        or f"text_model.encoder.layers.{n}.layer_norm1.weight" in t
    ):
        n += 1
    return n


CLIP = Architecture(
    "clip-text",
    "text_encoder",
    tuple(_CLIP_LAYERS),
    configure=lambda shapes, family: CLIPTextConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: CLIPTextModel(cfg, device=device, dtype=dtype),
    to_module={
        "open_clip": lambda t, fam: open_clip_to_hf(
            {k: v for k, v in t.items() if not k.startswith("visual.") and k != "logit_scale"},
            num_layers=_clip_layers(t),
        )
    },
    to_file={"open_clip": lambda t, fam: hf_to_open_clip(t, num_layers=_clip_layers(t))},
    harmless=frozenset({"text_model.embeddings.position_ids", "logit_scale"}),
)


def _t5_aliases(t: Tensors, family: str) -> Tensors:
    """``encoder.embed_tokens.weight`` is a tied copy of ``shared.weight``: use it when alone."""
    if "shared.weight" not in t and "encoder.embed_tokens.weight" in t:
        out = dict(t)
        out["shared.weight"] = out.pop("encoder.embed_tokens.weight")
        return out
    return t


T5 = Architecture(
    "t5-encoder",
    "text_encoder",
    ("t5-xxl", "t5-base", "umt5-xxl"),
    configure=lambda shapes, family: T5Config.from_shapes(shapes),
    build=lambda cfg, device, dtype: T5Encoder(cfg, device=device, dtype=dtype),
    normalize=_t5_aliases,
    harmless=frozenset({"encoder.embed_tokens.weight"}),
)

ARCHITECTURES: tuple[Architecture, ...] = (
    *(n.architecture for n in NETS),
    *(c.architecture for c in CODECS),
    CLIP,
    T5,
    *ENCODER_ARCHITECTURES,
)
_BY_FAMILY: dict[str, Architecture] = {f: a for a in ARCHITECTURES for f in a.families}


def architecture_for(family: str) -> Architecture | None:
    return _BY_FAMILY.get(family)


def loadable_families() -> tuple[str, ...]:
    return tuple(_BY_FAMILY)
