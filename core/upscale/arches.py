"""spandrel's architectures, as far as they import beside this torch.

spandrel (the library ComfyUI reads upscale models with) imports every architecture it supports
when the package is imported, and two of them (LaMa, RestoreFormer: an inpainter and a face
restorer, no upscalers) need torchvision, which cannot be installed beside Loadout's pinned torch.
So when torchvision is missing, the package is opened without running its ``__init__``: an
empty package module with spandrel's own search path stands in for it, its registry and
descriptor modules and each architecture are imported one by one, and those that fail to import
are left out of the registry (ESRGAN, RealESRGAN, SwinIR, HAT, DAT, Compact, SPAN, ... all load).
The stand-in carries the names spandrel's ``__init__`` exports, so code that imports ``spandrel``
afterwards sees the same classes. With torchvision present, spandrel is imported as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

#: spandrel's registry order (its main_registry.py): detection tries them in this order
_ORDER = (
    "Compact", "SwiftSRGAN", "HAT", "GRL", "Swin2SR", "SwinIR", "GFPGAN", "RestoreFormer", "LaMa",
    "OmniSR", "SCUNet", "FBCNN", "Uformer", "RGT", "DAT", "CRAFT", "KBNet", "DITN", "MMRealSR", "SPAN",
    "RealCUGAN", "SAFMN", "SAFMNBCIE", "DCTLSA", "FFTformer", "NAFNet", "ATD", "MixDehazeNet", "DRUNet",
    "DnCNN", "IPT", "DRCT", "ESRGAN", "PLKSR", "RetinexFormer", "HVICIDNet", "SeemoRe", "MoSR", "MoESR",
    "RCAN", "FDAT", "AuraSR",
)  # fmt: skip

_lock = threading.Lock()
_registry: Any = None
left_out: dict[str, str] = {}  # architecture -> why it could not be imported


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _shell() -> Any:
    """spandrel's package without its ``__init__`` (see the module notes); returns its registry."""
    spec = importlib.util.find_spec("spandrel")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("spandrel is not installed")
    package = sys.modules.get("spandrel")
    if package is None or not hasattr(package, "MAIN_REGISTRY"):
        package = types.ModuleType("spandrel", "spandrel, opened without its torchvision architectures")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["spandrel"] = package
    registry_mod = importlib.import_module("spandrel.__helpers.registry")
    descriptors = importlib.import_module("spandrel.__helpers.model_descriptor")
    canonical = importlib.import_module("spandrel.__helpers.canonicalize")
    registry = registry_mod.ArchRegistry()
    for name in _ORDER:
        try:
            arch = importlib.import_module(f"spandrel.architectures.{name}")
        except ImportError as exc:  # torchvision (or another missing package)
            left_out[name] = str(exc)
            continue
        registry.add(registry_mod.ArchSupport.from_architecture(getattr(arch, f"{name}Arch")()))
    for source in (registry_mod, descriptors, canonical):
        for attr in dir(source):
            if not attr.startswith("_") and not hasattr(package, attr):
                setattr(package, attr, getattr(source, attr))
    setattr(package, "MAIN_REGISTRY", registry)  # noqa: B010 - a module built here
    return registry


def registry() -> Any:
    """spandrel's ``ArchRegistry`` of the architectures that can be used here (built once)."""
    global _registry
    with _lock:
        if _registry is None:
            if _has("torchvision"):
                import spandrel

                _registry = spandrel.MAIN_REGISTRY
            else:
                _registry = _shell()
        return _registry
