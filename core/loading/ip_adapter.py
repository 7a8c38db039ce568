"""Loading an IP-Adapter file (kind ``ip_adapter``: h94's ``ip-adapter*_sd15`` / ``_sdxl_vit-h``
safetensors, ComfyUI's ``models/ipadapter``): the network is built on the meta device from the
file's shapes (``core.archs.catalog.IMAGE_PROMPT_ADAPTERS``), compared with the file key by key
before any data is read, and filled zero-copy from the memory-mapped file (the check and fill
every image-prompt file shares: :mod:`core.loading.image_prompts`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from core.archs.catalog import IMAGE_PROMPT_ADAPTERS
from core.archs.image_encoders import ImagePromptAdapter
from core.errors import ModelMismatchError
from core.files import TensorIndex
from core.loading.image_prompts import checked_module, file_shapes, fill
from core.loading.loader import LoadOptions, _refuse_unloadable_format, _wrong_kind, inspect_for_loading

ARCHITECTURE = "ip-adapter"


@dataclass
class LoadedIpAdapter:
    path: Path
    family: str  # the diffusion family it is for
    variant: str | None  # None (base), "plus", "plus-face", "full-face", or one of FACEID_VARIANTS
    encoder: str | None  # the image encoder family it reads (clip-vit-h ...)
    embeds: str  # "image_embeds" (base), "penultimate" (plus), "face" / "face+penultimate" (FaceID)
    arch: ImagePromptAdapter
    module: nn.Module


#: the adapters that read InsightFace's face embedding
FACEID_VARIANTS = ("faceid", "faceid-portrait", "faceid-plus", "faceid-plusv2")
_UNSUPPORTED = {
    "faceid-portrait-unnorm": (
        "the SDXL FaceID portrait adapter that reads the unnormalised face embedding",
        "Use ip-adapter-faceid-portrait_sdxl or ip-adapter-faceid_sdxl",
    ),
    "faceid-kolors": ("Kolors' FaceID IP-Adapter", "Use an SD1.5 or SDXL FaceID IP-Adapter"),
}


def _refuse_unsupported_variant(name: str, variant: str | None) -> None:
    if variant in _UNSUPPORTED:
        what, fix = _UNSUPPORTED[variant]
        raise ModelMismatchError(
            f"{name} is {what}, which Loadout does not run yet",
            why="Loadout computes the base, plus, plus-face, full-face and FaceID (plain, portrait, Plus, "
            "Plus v2) image projections",
            fix=fix,
            code="unsupported_variant",
        )


def _adapter_shapes(index: TensorIndex, variant: str | None) -> dict[str, tuple[int, ...]]:
    """The shapes the network is checked against: a FaceID file's LoRA (``ip_adapter.N.to_q_lora``
    ...) is left out, as ComfyUI_IPAdapter_plus leaves it (the artist loads the FaceID LoRA file
    with the LoRAs)."""
    shapes = file_shapes(index)
    if variant in FACEID_VARIANTS:
        return {k: v for k, v in shapes.items() if "_lora." not in k}
    return shapes


def load_ip_adapter(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedIpAdapter:
    """Load an IP-Adapter; refuses another kind of file and a damaged layout before reading data."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if det.kind != "ip_adapter":
        raise _wrong_kind(name, det, "ip_adapter")
    _refuse_unsupported_variant(name, det.variant)
    if det.family is None:
        raise ModelMismatchError(
            f"{name} is an IP-Adapter for a model family Loadout does not know",
            why=det.warnings[0] if det.warnings else "its cross-attention width is not SD1's or SDXL's",
            fix="Use an IP-Adapter made for SD1.5 or SDXL",
            code="unsupported_family",
        )
    _refuse_unloadable_format(index)
    arch = IMAGE_PROMPT_ADAPTERS[ARCHITECTURE]
    shapes = _adapter_shapes(index, det.variant)
    build = lambda: arch.build(arch.configure(shapes), "meta", None)  # noqa: E731
    module = checked_module(name, "IP-Adapter", build, shapes)
    fill(module, index, f"IP-Adapter ({det.family})", opts)
    embeds = str(det.fields.get("embeds") or "image_embeds")
    encoder = det.fields.get("encoder")
    return LoadedIpAdapter(
        index.path, det.family, det.variant, None if encoder is None else str(encoder), embeds, arch, module
    )
