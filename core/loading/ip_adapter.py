"""Loading an IP-Adapter file (kind ``ip_adapter``: h94's ``ip-adapter*_sd15`` / ``_sdxl_vit-h``
safetensors, ComfyUI's ``models/ipadapter``): the network is built on the meta device from the
file's shapes (``core.archs.catalog.IMAGE_PROMPT_ADAPTERS``), compared with the file key by key
before any data is read, and filled zero-copy from the memory-mapped file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from core.archs.catalog import IMAGE_PROMPT_ADAPTERS
from core.archs.image_encoders import ImagePromptAdapter
from core.errors import ModelMismatchError
from core.loading.assign import assign_weights, compare_layout, expected_layout
from core.loading.loader import (
    LoadOptions,
    _refuse_unloadable_format,
    _Source,
    _wrong_kind,
    inspect_for_loading,
)

ARCHITECTURE = "ip-adapter"


@dataclass
class LoadedIpAdapter:
    path: Path
    family: str  # the diffusion family it is for
    variant: str | None  # None (base), "plus", "plus-face"
    encoder: str | None  # the image encoder family it reads (clip-vit-h ...)
    embeds: str  # which output of the encoder: "image_embeds" (base) or "penultimate" (plus)
    arch: ImagePromptAdapter
    module: nn.Module


def load_ip_adapter(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedIpAdapter:
    """Load an IP-Adapter; refuses another kind of file and a damaged layout before reading data."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if det.kind != "ip_adapter":
        raise _wrong_kind(name, det, "ip_adapter")
    if det.family is None:
        raise ModelMismatchError(
            f"{name} is an IP-Adapter for a model family Loadout does not know",
            why=det.warnings[0] if det.warnings else "its cross-attention width is not SD1's or SDXL's",
            fix="Use an IP-Adapter made for SD1.5 or SDXL",
            code="unsupported_family",
        )
    _refuse_unloadable_format(index)
    arch = IMAGE_PROMPT_ADAPTERS[ARCHITECTURE]
    shapes = {k: tuple(info.shape) for k, info in index.tensors.items()}
    try:
        module = arch.build(arch.configure(shapes), "meta", None)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ModelMismatchError(
            f"{name}: the IP-Adapter does not have a layout Loadout knows",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    report = compare_layout(expected_layout(module), shapes)
    if not report.ok:
        bad = (report.missing or report.unexpected or report.shape_mismatches)[0]
        raise ModelMismatchError(
            f"{name}: the IP-Adapter's tensors do not fit together",
            why=f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
            f"{len(report.shape_mismatches)} with the wrong shape (e.g. {bad})",
            fix="The file may be damaged or another kind of adapter: run `loadout inspect` on it",
            code="layout_mismatch",
        )
    source = _Source(index)
    assign_weights(
        module, source.get, {k: k for k in module.state_dict(keep_vars=True)},
        component=f"IP-Adapter ({det.family})", dtype=opts.dtype, device=opts.device, check=opts.check,
        progress=opts.progress,
    )  # fmt: skip
    module.eval()
    embeds = str(det.fields.get("embeds") or "image_embeds")
    encoder = det.fields.get("encoder")
    return LoadedIpAdapter(
        index.path, det.family, det.variant, None if encoder is None else str(encoder), embeds, arch, module
    )
