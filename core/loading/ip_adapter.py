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
from core.loading.image_prompts import checked_module, file_shapes, fill
from core.loading.loader import LoadOptions, _refuse_unloadable_format, _wrong_kind, inspect_for_loading

ARCHITECTURE = "ip-adapter"


@dataclass
class LoadedIpAdapter:
    path: Path
    family: str  # the diffusion family it is for
    variant: str | None  # None (base), "plus", "plus-face", "full-face"
    encoder: str | None  # the image encoder family it reads (clip-vit-h ...)
    embeds: str  # which output of the encoder: "image_embeds" (base) or "penultimate" (plus)
    arch: ImagePromptAdapter
    module: nn.Module


def _refuse_unsupported_variant(name: str, variant: str | None) -> None:
    if variant == "faceid":
        raise ModelMismatchError(
            f"{name} is a FaceID IP-Adapter, which Loadout does not run yet",
            why="a FaceID adapter reads the face with InsightFace's face analysis models (the ONNX "
            "buffalo_l / antelopev2 files, run by the insightface and onnxruntime packages), which "
            "Loadout does not include",
            fix="Use an IP-Adapter that reads pictures with CLIP vision (e.g. ip-adapter-plus-face_sd15 "
            "for faces), or ComfyUI_IPAdapter_plus with insightface for FaceID",
            code="unsupported_variant",
        )


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
    shapes = file_shapes(index)
    build = lambda: arch.build(arch.configure(shapes), "meta", None)  # noqa: E731
    module = checked_module(name, "IP-Adapter", build, shapes)
    fill(module, index, f"IP-Adapter ({det.family})", opts)
    embeds = str(det.fields.get("embeds") or "image_embeds")
    encoder = det.fields.get("encoder")
    return LoadedIpAdapter(
        index.path, det.family, det.variant, None if encoder is None else str(encoder), embeds, arch, module
    )
