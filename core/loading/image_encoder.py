"""Loading an image encoder file (kind ``image_encoder``: CLIP's and SigLIP's vision towers,
ComfyUI's ``models/clip_vision``): the architecture package its family names
(``core.archs.catalog.image_encoder_for``) builds the network on the meta device, the file's keys
and shapes are compared with it key by key before any data is read (keys the package knows and
does not load, such as SigLIP's pooling head or a CLIP file's text tower, are left out by name),
then each tensor is assigned zero-copy from the memory-mapped file (a view of a fused open_clip
tensor where the layout is open_clip's)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from core.archs.catalog import IMAGE_ENCODERS, image_encoder_for
from core.archs.image_encoders import ImageEncoderArchitecture
from core.detect.catalog import family_title
from core.detect.types import Detection
from core.errors import ModelMismatchError
from core.loading.image_prompts import checked_module, file_shapes, fill
from core.loading.loader import LoadOptions, _refuse_unloadable_format, _wrong_kind, inspect_for_loading


@dataclass(eq=False)  # one per loaded file: told apart by identity
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
        known = ", ".join(family_title(f) for a in IMAGE_ENCODERS for f in a.families)
        raise ModelMismatchError(
            f"{name} is a {det.family} image encoder, which Loadout cannot run yet",
            why="no network of that family is built in",
            fix=f"Use one of the image encoders Loadout runs ({known}; ComfyUI's models/clip_vision)",
            code="unsupported_family",
        )
    return arch


def load_image_encoder(
    path: str | os.PathLike[str], options: LoadOptions | None = None
) -> LoadedImageEncoder:
    """Load an image encoder; refuses another kind of file, an encoder of a family Loadout does not
    run and a damaged layout before reading data."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    arch = _architecture(name, det)
    _refuse_unloadable_format(index)
    shapes = file_shapes(index)
    layout = det.layout or "transformers"
    sources = arch.sources(shapes, layout)
    used = {s.key for s in sources.values()}
    wanted = {k: s.shape(shapes) for k, s in sources.items() if s.key in shapes}
    stray = {k: v for k, v in shapes.items() if k not in used and not arch.ignored(k)}
    build = lambda: arch.build(arch.configure(wanted), "meta", None)  # noqa: E731
    module = checked_module(name, family_title(det.family), build, wanted | stray)
    fill(module, index, f"image encoder ({det.family})", opts, lambda key, get: sources[key].read(get))
    return LoadedImageEncoder(index.path, det.family or "", layout, arch, module)
