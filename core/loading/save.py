"""Writing a loaded bundle back to one file, in the layout it came from.

Each component's module state is converted back to its file layout (open_clip text encoders go
back to open_clip names; diffusers-named inputs are written in the original layout, which every
tool reads), put under its prefix, and the file's other tensors (scheduler buffers, position ids)
are written back unchanged. An unpatched model round-trips bit for bit. The write is atomic and
never touches the input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from core.files.writer import WriteProgress, refuse_same_file, write_safetensors
from core.loading.loader import ModelBundle

#: ModelSpec architecture ids (https://github.com/Stability-AI/ModelSpec) by family
MODELSPEC_ARCHITECTURE = {
    "sd1": "stable-diffusion-v1",
    "sd2": "stable-diffusion-v2-768-v",
    "sdxl": "stable-diffusion-xl-v1-base",
    "sdxl-refiner": "stable-diffusion-xl-v1-refiner",
    "ssd-1b": "stable-diffusion-xl-v1-base",
    "segmind-vega": "stable-diffusion-xl-v1-base",
    "sd3": "stable-diffusion-3-medium",
    "sd3.5-medium": "stable-diffusion-3.5-medium",
    "sd3.5-large": "stable-diffusion-3.5-large",
    "flux-dev": "flux-1-dev",
    "flux-schnell": "flux-1-schnell",
    "flux-fill": "flux-1-dev-fill",
    "chroma": "chroma",
}


def checkpoint_tensors(bundle: ModelBundle) -> dict[str, torch.Tensor]:
    """Every tensor of the file to write, by full key."""
    out: dict[str, torch.Tensor] = {}
    for comp in bundle.components:
        state = comp.module.state_dict()
        in_file = comp.plan.architecture.convert_out(state, comp.layout, comp.family)
        for key, tensor in in_file.items():
            out[comp.prefix + key] = tensor
    for key, get in bundle.extras.items():
        out.setdefault(key, get())
    return out


def modelspec(bundle: ModelBundle, title: str | None = None) -> dict[str, str]:
    meta = {"modelspec.sai_model_spec": "1.0.0"}
    family = bundle.detection.family
    if family in MODELSPEC_ARCHITECTURE:
        meta["modelspec.architecture"] = MODELSPEC_ARCHITECTURE[family]
    meta["modelspec.title"] = title or bundle.metadata.get("modelspec.title") or bundle.path.stem
    meta["modelspec.implementation"] = "loadout"
    return meta


def save_checkpoint(
    bundle: ModelBundle,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, str] | None = None,
    progress: Callable[[WriteProgress], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Path:
    """Write ``bundle`` to ``path`` (safetensors). The source's metadata is kept, ModelSpec
    fields are added, and ``metadata`` (e.g. a record of merged LoRAs) goes on top."""
    out = Path(path)
    refuse_same_file(out, bundle.path)
    meta = dict(bundle.metadata)
    meta.update(modelspec(bundle))
    if metadata:
        meta.update(metadata)
    meta["loadout.source"] = json.dumps({"file": bundle.path.name, "family": bundle.detection.family})
    return write_safetensors(out, checkpoint_tensors(bundle), meta, progress=progress, check=check)
