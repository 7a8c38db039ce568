"""Loading an image encoder file (kind ``image_encoder``: CLIP vision towers, ComfyUI's
``models/clip_vision``): the architecture package its family names (``core.archs.catalog``)
builds the network on the meta device, the file's keys and shapes are compared with it key by key
before any data is read, then each tensor is assigned zero-copy from the memory-mapped file (a
view of a fused open_clip tensor where the layout is open_clip's)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from core.archs.catalog import image_encoder_for
from core.archs.image_encoders import ImageEncoderArchitecture
from core.detect.types import Detection
from core.errors import ModelMismatchError
from core.loading.assign import assign_weights, compare_layout, expected_layout
from core.loading.loader import (
    LoadOptions,
    _refuse_unloadable_format,
    _Source,
    _wrong_kind,
    inspect_for_loading,
)


@dataclass
class LoadedImageEncoder:
    path: Path
    family: str
    layout: str
    arch: ImageEncoderArchitecture
    module: nn.Module


def _architecture(name: str, det: Detection) -> ImageEncoderArchitecture:
    if det.kind != "image_encoder":
        raise _wrong_kind(name, det, "image_encoder")
    arch = image_encoder_for(det.family)
    if arch is None:
        raise ModelMismatchError(
            f"{name} is a {det.family} image encoder, which Loadout cannot run yet",
            why="no network of that family is built in",
            fix="Use a CLIP ViT-H/14 or ViT-bigG/14 vision model (ComfyUI's models/clip_vision)",
            code="unsupported_family",
        )
    return arch


def load_image_encoder(
    path: str | os.PathLike[str], options: LoadOptions | None = None
) -> LoadedImageEncoder:
    """Load an image encoder; refuses another kind of file and a damaged layout before reading data."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    arch = _architecture(name, det)
    _refuse_unloadable_format(index)
    shapes = {k: info.shape for k, info in index.tensors.items()}
    layout = det.layout or "transformers"
    sources = arch.sources(shapes, layout)
    used = {s.key for s in sources.values()}  # type: ignore[attr-defined]
    try:
        wanted = {k: s.shape(shapes) for k, s in sources.items()}
        module = arch.build(arch.configure(wanted), "meta", None)
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelMismatchError(
            f"{name}: the image encoder does not have the layout of a {det.family} vision tower",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    stray = {k: tuple(v) for k, v in shapes.items() if k not in used and not arch.ignored(k)}
    report = compare_layout(expected_layout(module), wanted | stray)
    if not report.ok:
        bad = (report.missing or report.unexpected or report.shape_mismatches)[0]
        raise ModelMismatchError(
            f"{name}: the image encoder does not match the {det.family} architecture",
            why=f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
            f"{len(report.shape_mismatches)} with the wrong shape (e.g. {bad})",
            fix="The file may be damaged or another kind of model: run `loadout inspect` on it",
            code="layout_mismatch",
        )
    source = _Source(index)
    assign_weights(
        module, lambda key: sources[key].read(source.get), {k: k for k in module.state_dict(keep_vars=True)},
        component=f"image encoder ({det.family})", dtype=opts.dtype, device=opts.device, check=opts.check,
        progress=opts.progress,
    )  # fmt: skip
    module.eval()
    return LoadedImageEncoder(index.path, det.family or "", layout, arch, module)
