"""The three registries, built from the architecture packages found in ``core/archs`` (each package
exports ``NET`` and ``CONVENTIONS``, or ``CODEC``, and may export ``REFERENCES``; nothing registers
itself on import: the catalog reads them once, in name order), and how the rest of the engine
finds a family's parts.

Adding an architecture is adding its package; a family record (``core/detect/diffusion_families.py``)
names the ids (docs/architecture.md, "Adding a family").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from torch import nn

import core.archs
from core.archs.blocks import BlockTable
from core.archs.control import ControlNetLoader
from core.archs.image_encoders import (
    ImageEncoderArchitecture,
    ImagePromptAdapter,
    StyleModelArchitecture,
)
from core.archs.layouts import Architecture
from core.archs.preprocessors import PreprocessorNet
from core.archs.protocols import DiffusionNet, LatentCodec, TextConvention
from core.archs.references import ReferenceConvention
from core.archs.registry import Registry
from core.detect.catalog import REGISTRY, diffusion_spec
from core.errors import ModelMismatchError


def packages() -> tuple[ModuleType, ...]:
    """Every architecture package under ``core/archs``, in name order."""
    found = sorted(m.name for m in pkgutil.iter_modules(core.archs.__path__) if m.ispkg)
    return tuple(importlib.import_module(f"core.archs.{name}") for name in found)


def _parts(name: str) -> Iterator[Any]:
    for package in packages():
        value = getattr(package, name, None)
        if isinstance(value, tuple):
            yield from value
        elif value is not None:
            yield value


NETS: Registry[DiffusionNet] = Registry("diffusion network", _parts("NET"))
TEXTS: Registry[TextConvention] = Registry("text convention", _parts("CONVENTIONS"))
CODECS: Registry[LatentCodec] = Registry("latent codec", _parts("CODEC"))
#: the networks' block tables (per-block merges, LoRA block weights), named by family records
BLOCKS: Registry[BlockTable] = Registry("block table", _parts("BLOCKS"))
#: how families take reference pictures (a package's ``REFERENCES``; ``DiffusionSpec.references``)
REFERENCES: Registry[ReferenceConvention] = Registry("reference convention", _parts("REFERENCES"))
#: the ControlNet kinds packages bring (a package's ``CONTROLNETS``; the UNets' load on their own)
CONTROLNETS: Registry[ControlNetLoader] = Registry("ControlNet loader", _parts("CONTROLNETS"))
#: the networks that make ControlNet hints (a package's ``PREPROCESSOR``), by family id
PREPROCESSOR_NETS: Registry[PreprocessorNet] = Registry("preprocessor network", _parts("PREPROCESSOR"))
#: the loading records (file layouts) of text encoders that live in packages (the decoder LLMs)
ENCODER_ARCHITECTURES: tuple[Architecture, ...] = tuple(_parts("ENCODER_ARCHITECTURES"))
#: the image encoders (vision towers image prompts read: a package's ``IMAGE_ENCODER``)
IMAGE_ENCODERS: Registry[ImageEncoderArchitecture] = Registry("image encoder", _parts("IMAGE_ENCODER"))
#: image-prompt adapters (IP-Adapter: a package's ``IMAGE_PROMPT_ADAPTER``)
IMAGE_PROMPT_ADAPTERS: Registry[ImagePromptAdapter] = Registry(
    "image prompt adapter", _parts("IMAGE_PROMPT_ADAPTER")
)
#: style models (FLUX Redux: a package's ``STYLE_MODELS``), by the LoRA group of the models they fit
STYLE_MODELS: Registry[StyleModelArchitecture] = Registry("style model", _parts("STYLE_MODELS"))


def image_encoder_for(family: str | None) -> ImageEncoderArchitecture | None:
    """The image encoder package that builds ``family`` (None: none does)."""
    return next((a for a in IMAGE_ENCODERS if family in a.families), None)


def find_in_packages(module: str, name: str) -> Any:
    """``name`` from the package module ``core.archs.<package>.<module>`` that defines it (what
    the modules that kept an older import path hand on); AttributeError when none does."""
    for package in packages():
        try:
            found = importlib.import_module(f"{package.__name__}.{module}")
        except ModuleNotFoundError:
            continue
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"no architecture package's {module} module defines {name!r}")


def controlnet_loader(family: str | None, layout: str | None) -> ControlNetLoader | None:
    """The package ControlNet kind that loads a ControlNet file detected as ``family``/``layout``."""
    return next((c for c in CONTROLNETS if c.accepts(family, layout)), None)


def controlnet_types(family: str | None) -> tuple[str, ...]:
    """The union control types the package kinds loading ControlNets of ``family`` name (a
    ControlNet of that family may still be no union net: loading it tells)."""
    return next((c.control_types for c in CONTROLNETS if family in c.families and c.control_types), ())


def controlnet_inpaints_alone(family: str | None) -> bool:
    """Whether ControlNets of ``family`` may run with no control picture while inpainting (some
    files of that family may still need one: loading tells)."""
    return any(c.inpaints_alone for c in CONTROLNETS if family in c.families)


def net_for(family: str) -> DiffusionNet:
    """The network a generating family's record names (refused in words for one that cannot)."""
    spec = diffusion_spec(family)
    assert spec.network is not None
    return NETS[spec.network]


def text_for(family: str) -> TextConvention:
    spec = diffusion_spec(family)
    assert spec.text is not None
    return TEXTS[spec.text]


def blocks_for(family: str | None) -> BlockTable | None:
    """The block table ``family``'s record names (None: a family merged as one block)."""
    fam = REGISTRY.get(family) if family is not None else None
    if fam is None or fam.diffusion is None or fam.diffusion.blocks is None:
        return None
    return BLOCKS[fam.diffusion.blocks]


def codec_for(family: str) -> LatentCodec:
    return CODECS[diffusion_spec(family).codec]


def references_for(family: str) -> ReferenceConvention | None:
    """How a generating family takes reference pictures (None: it takes none)."""
    return REFERENCES.get(diffusion_spec(family).references)


def reference_limit(family: str | None) -> int:
    """The most reference pictures a family takes (0: none, or no such family)."""
    fam = REGISTRY.get(family) if family else None
    spec = fam.diffusion if fam is not None else None
    rule = REFERENCES.get(spec.references) if spec is not None else None
    return rule.most if rule is not None else 0


def net_of(module: nn.Module, *, action: str = "generate with") -> DiffusionNet:
    """The network ``module`` is (a loaded diffusion model), or a refusal naming what it is."""
    for net in NETS:
        if net.owns(module):
            return net
    titles = [f.title for f in REGISTRY if f.diffusion is not None and f.diffusion.network in NETS]
    raise ModelMismatchError(
        f"Loadout cannot {action} a {type(module).__name__}",
        why="that needs a diffusion model of a supported family",
        fix="Load a checkpoint or diffusion model of one of: " + ", ".join(dict.fromkeys(titles)),
        code="wrong_kind",
    )


def codec_of(module: nn.Module) -> LatentCodec | None:
    """The codec that works ``module`` (a loaded VAE), or None."""
    return next((c for c in CODECS if c.owns(module)), None)


def missing_parts(family: str | None, loaded: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """What a loaded diffusion model of ``family`` still lacks to generate, as (role, family) pairs:
    the text encoders its prompt encoding takes (its record's, in order) and a VAE (its record's
    family named; any loaded VAE serves), less the ``loaded`` (role, family) components, a
    checkpoint's own or separate files. An encoder stands in for another where its convention's
    tower says so (``TowerSpec.also``: a T5-XXL file read as t5-base); a tower the convention can
    do without (``required=False``: SD3's T5 or either CLIP) is not asked for once another of its
    towers is loaded. Empty for a family Loadout cannot generate with."""
    fam = REGISTRY.get(family) if family else None
    spec = fam.diffusion if fam is not None else None
    if spec is None or spec.text is None or spec.network is None:
        return ()
    have = set(loaded)
    encoders = {f for role, f in have if role == "text_encoder"}
    towers = {t.encoder: t for t in TEXTS[spec.text].towers}

    def present(encoder: str) -> bool:
        tower = towers.get(encoder)
        return bool({encoder, *(tower.also if tower is not None else ())} & encoders)

    some = any(present(e) for e in spec.text_encoders)
    missing = [
        ("text_encoder", e)
        for e in spec.text_encoders
        if not present(e) and not (some and e in towers and not towers[e].required)
    ]
    if not any(role == "vae" for role, _family in have):
        missing.append(("vae", spec.vae))
    return tuple(missing)
