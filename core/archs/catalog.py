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
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from torch import nn

import core.archs
from core.archs.layouts import Architecture
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
#: how families take reference pictures (a package's ``REFERENCES``; ``DiffusionSpec.references``)
REFERENCES: Registry[ReferenceConvention] = Registry("reference convention", _parts("REFERENCES"))
#: the loading records (file layouts) of text encoders that live in packages (the decoder LLMs)
ENCODER_ARCHITECTURES: tuple[Architecture, ...] = tuple(_parts("ENCODER_ARCHITECTURES"))


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
