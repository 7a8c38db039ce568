"""FaceID's image tokens, as ComfyUI_IPAdapter_plus's ``ipadapter_execute`` computes them:

* the face (read before any model work, :func:`read_face`): the picture in BGR order through
  InsightFace's face analysis (:mod:`core.faces`), the best face's *normed* embedding;
* FaceID (plain, portrait): ``proj`` then ``norm`` of the embedding; the negative prompt's tokens
  are those of a zero embedding (``torch.zeros_like``);
* FaceID Plus: the face cropped by its landmarks (``norm_crop``: 224 x 224 for SD1.5, 256 x 256 for
  SDXL) and read by CLIP vision as any picture (the penultimate hidden states); the tokens are the
  face resampler's over them, plus (v2) the face tokens times ``scale`` (the pack's
  ``weight_faceidv2``, default twice the weight); the negative prompt's are a zero embedding's
  over the penultimate states of an all-black 224 x 224 picture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from core.faces.analysis import Face, FaceReader, face_crop, rgb_to_bgr
from core.faces.files import missing_folder
from core.generate.pictures import unit_pixels
from core.loading.image_encoder import LoadedImageEncoder
from core.loading.ip_adapter import LoadedIpAdapter

#: the face crop's side FaceID Plus reads with CLIP vision (the pack: 256 for SDXL, else 224)
CROP = {"sdxl": 256}
EMPTY_SIZE = 224


def read_face(reader: FaceReader, picture: np.ndarray, path: Path) -> Face:
    """The best face of ``picture`` ((H, W, 3) uint8 RGB); refused in words when there is none."""
    return reader.read(rgb_to_bgr(picture), path.name)


def face_scale(adapter: LoadedIpAdapter, weight: float, given: float | None) -> float:
    """FaceID Plus v2's shortcut scale: the given one, else twice the weight (the pack's default)."""
    return given if given is not None else weight * 2


def face_tokens(
    adapter: LoadedIpAdapter, encoder: LoadedImageEncoder | None, picture: np.ndarray, face: Face,
    scale: float, device: torch.device, text_dtype: torch.dtype, dtype: torch.dtype,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The positive and negative prompts' tokens of a FaceID adapter (float32, on the CPU)."""
    arch, module = adapter.arch, adapter.module
    embedding = torch.from_numpy(np.array(face.normed_embedding, dtype=np.float32))[None]
    if adapter.embeds != "face+penultimate":
        pos = arch.project(module, embedding.to(device, dtype))
        neg = arch.project(module, torch.zeros_like(embedding).to(device, dtype))
        return pos.float().cpu(), neg.float().cpu()
    assert encoder is not None
    crop = face_crop(picture, face, CROP.get(adapter.family, 224))
    clip = encoder.arch.encode(encoder.module, unit_pixels(crop), device, text_dtype).penultimate
    black = torch.zeros(1, 3, EMPTY_SIZE, EMPTY_SIZE)
    empty = encoder.arch.encode(encoder.module, black, device, text_dtype).penultimate
    shortcut = adapter.variant == "faceid-plusv2"
    pos = arch.project_face_plus(module, embedding.to(device, dtype), clip.to(dtype), scale, shortcut)
    neg = arch.project_face_plus(
        module, torch.zeros_like(embedding).to(device, dtype), empty.to(dtype), scale, shortcut
    )
    return pos.float().cpu(), neg.float().cpu()


#: where InsightFace's buffalo_l files are looked for, relative to a folder given, a ComfyUI
#: install's models folder or the adapter's folder
_BUFFALO = ("models/buffalo_l", "buffalo_l", ".")


def _holding(folder: Path) -> Path | None:
    for sub in _BUFFALO:
        found = (folder / sub).resolve()
        if found.is_dir() and any(found.glob("*.onnx")):
            return found
    return None


def face_folder(given: Path | None, installs: tuple[Path, ...], near: Path) -> Path:
    """The folder of InsightFace's files: the one given (or its ``models/buffalo_l``, as ComfyUI's
    ``models/insightface`` holds it), else a ComfyUI install's ``models/insightface/models/buffalo_l``,
    else the ``insightface`` folder beside the adapter's (ComfyUI's models/ipadapter sits beside
    models/insightface); refused in words, naming where it looked, when there is none."""
    if given is not None:
        found = _holding(Path(given))
        if found is None:
            raise missing_folder(Path(given))
        return found
    places = [root / "models" / "insightface" for root in installs]
    places.append(Path(near).resolve().parent.parent / "insightface")
    for place in places:
        found = _holding(place)
        if found is not None:
            return found
    raise missing_folder(None, places)
