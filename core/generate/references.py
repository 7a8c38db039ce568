"""Editing with reference pictures, as ComfyUI's edit templates wire it: each picture is read
(LoadImage), scaled by the family's rule (:mod:`core.archs.references`: ``FluxKontextImageScale``,
``ImageScaleToTotalPixels``, ``TextEncodeQwenImageEditPlus``), VAE-encoded (``VAEEncode``: the
centre crop to the VAE's multiple) and put into the prompts' conditioning (``ReferenceLatent``, on
the positive and, where the family's template does, the negative prompt).

:func:`read_references` reads and checks the pictures before anything runs (the family must take
references, no more than it takes, each a picture Loadout reads); :class:`ReferencePass` adds the
encoding to the plan (it runs before the prompts are encoded, since a family's prompt encoding may
read the pictures: :class:`~core.archs.references.PromptPictures`), and its PNG text names each
picture by file name and the first 12 hex digits of its SHA-256 (``References: "a.png: 0123..."``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

from core.archs.catalog import references_for
from core.archs.references import OwnSize, PromptPictures, ReferenceConvention, ReferenceScale
from core.detect.catalog import REGISTRY
from core.errors import LoadoutError, ModelMismatchError
from core.files.leases import open_input
from core.generate.passes import Contribution, Plan, References, Run
from core.generate.pictures import read_picture
from core.generate.request import ImageSettings
from core.memory.inference import Workload, activation_bytes

#: the PNG parameters' keys: the pictures; their size when kept (absent: the family's scaling)
PARAMETER, SIZE_PARAMETER = "References", "Reference size"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReferencePicture:
    """One reference picture as read: (H, W, 3) uint8 RGB and the file's SHA-256."""

    path: Path
    rgb: np.ndarray
    sha256: str

    def unit(self) -> Tensor:
        """``[1, 3, H, W]`` float32 in [0, 1] (ComfyUI's LoadImage, channels first)."""
        return torch.from_numpy(np.array(self.rgb)).float().div(255.0).permute(2, 0, 1)[None]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_input(path) as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _title(family: str) -> str:
    found = REGISTRY.get(family)
    return found.title if found is not None else family


def convention_for(family: str, count: int, own_size: bool = False) -> ReferenceConvention:
    """The family's reference convention, refused in words when it takes none or fewer pictures;
    ``own_size``: each picture kept at its own size (:class:`~core.archs.references.OwnSize`)."""
    rule = references_for(family)
    if rule is None:
        raise ModelMismatchError(
            f"a {_title(family)} model takes no reference pictures",
            why="reference pictures are read by editing models (FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit)",
            fix="Leave the reference pictures out, or load an editing model",
            code="wrong_kind",
        )
    if count > rule.most:
        raise LoadoutError(
            f"{count} reference pictures were given; a {_title(family)} model takes at most {rule.most}",
            fix=f"Give at most {rule.most} reference picture{'s' if rule.most > 1 else ''}",
            code="bad_argument",
        )
    return OwnSize(rule) if own_size else rule


def read_references(paths: tuple[Path, ...], family: str) -> tuple[ReferencePicture, ...]:
    """Each picture read and hashed (the family checked first: nothing is read for one that takes
    no references or fewer pictures)."""
    convention_for(family, len(paths))
    found = []
    for path in paths:
        rgb = read_picture(path, "reference picture")
        found.append(ReferencePicture(Path(path), rgb, file_sha256(path)))
    return tuple(found)


def _lanczos(pixels: Tensor, width: int, height: int) -> Tensor:
    """ComfyUI's ``lanczos``: to 8-bit (``255 * x`` clipped, truncated), Pillow's LANCZOS, back."""
    out = []
    for image in pixels:
        arr = np.clip(255.0 * image.movedim(0, -1).numpy(), 0, 255).astype(np.uint8)
        resized = Image.fromarray(arr).resize((width, height), resample=Image.Resampling.LANCZOS)
        out.append(torch.from_numpy(np.array(resized).astype(np.float32) / 255.0).movedim(-1, 0))
    return torch.stack(out)


def scale_picture(pixels: Tensor, scale: ReferenceScale) -> Tensor:
    """ComfyUI's ``common_upscale(pixels, width, height, method, crop)`` of ``[B, 3, H, W]`` pixels
    in [0, 1]: the centre crop to the new aspect ratio (``crop``), then the resampling (none for
    ``none``: the picture kept as it is)."""
    if scale.method == "none":
        return pixels
    if scale.crop:
        old_h, old_w = pixels.shape[-2], pixels.shape[-1]
        old_aspect, new_aspect = old_w / old_h, scale.width / scale.height
        x = y = 0
        if old_aspect > new_aspect:
            x = round((old_w - old_w * (new_aspect / old_aspect)) / 2)
        elif old_aspect < new_aspect:
            y = round((old_h - old_h * (old_aspect / new_aspect)) / 2)
        pixels = pixels.narrow(-2, y, old_h - 2 * y).narrow(-1, x, old_w - 2 * x)
    if scale.method == "lanczos":
        return _lanczos(pixels, scale.width, scale.height)
    return F.interpolate(pixels, size=(scale.height, scale.width), mode=scale.method)


def crop_to(pixels: Tensor, multiple: int) -> Tensor:
    """Each side cut down to a multiple of ``multiple`` around the centre (ComfyUI's VAE.encode)."""
    h, w = pixels.shape[-2] // multiple * multiple, pixels.shape[-1] // multiple * multiple
    top, left = (pixels.shape[-2] % multiple) // 2, (pixels.shape[-1] % multiple) // 2
    return pixels[..., top : top + h, left : left + w]


def scaled_reference(picture: ReferencePicture, rule: ReferenceConvention, multiple: int) -> Tensor:
    """The picture as the family's VAE encodes it: ``[1, 3, h, w]`` in [0, 1]."""
    unit = picture.unit()
    scaled = crop_to(scale_picture(unit, rule.scale(unit.shape[-1], unit.shape[-2])), multiple)
    if scaled.shape[-1] < multiple or scaled.shape[-2] < multiple:
        raise LoadoutError(
            f"the reference picture {picture.path.name} is too small once scaled",
            fix=f"Use a picture of at least {multiple}x{multiple} pixels",
            code="bad_argument",
        )
    return scaled


@dataclass(frozen=True)
class EncodeReferences:
    """Before the prompts: each picture scaled by ``rule`` and VAE-encoded into the model's latent
    space."""

    pictures: tuple[ReferencePicture, ...]
    rule: ReferenceConvention

    def __call__(self, run: Run) -> None:
        pipe, rule = run.pipeline, self.rule
        multiple = pipe.codec.downscale(pipe.nets.vae)
        latents = []
        for picture in self.pictures:
            run.hooks.check()
            scaled = scaled_reference(picture, rule, multiple)
            latents.append(pipe.latent_format.process_in(pipe.encode_pixels(scaled * 2.0 - 1.0, run.hooks)))
        shown = PromptPictures(tuple(p.unit() for p in self.pictures), tuple(p.sha256 for p in self.pictures))
        run.references = References(tuple(latents), shown, rule.negative)


def activation_room(
    profile: str | None, width: int | None, work: Workload, pictures: tuple[ReferencePicture, ...],
    rule: ReferenceConvention,
) -> int:  # fmt: skip
    """The activation bytes a step needs beyond the picture's for the reference tokens: the
    measured model at the picture's area plus the scaled references' (the same width, taller)
    less the model at the picture's own."""
    sizes = [rule.scale(p.rgb.shape[1], p.rgb.shape[0]) for p in pictures]
    extra = sum(s.width * s.height for s in sizes)
    taller = replace(work, height=work.height + -(-extra // work.width))
    return max(activation_bytes(profile, taller, width) - activation_bytes(profile, work, width), 0)


def parameter_text(pictures: tuple[ReferencePicture, ...]) -> str:
    """``a.png: 0123456789ab, b.png: ...`` (commas dropped from the names)."""
    return ", ".join(f"{p.path.name.replace(',', '')}: {p.sha256[:12]}" for p in pictures)


@dataclass(frozen=True)
class ReferenceUse:
    """A reference picture as a picture's parameters name it."""

    name: str
    hash: str  # the first 12 hex digits of the file's SHA-256


def references_in(extra: dict[str, str]) -> tuple[ReferenceUse, ...]:
    """The ``References`` item of an infotext's extra keys, in order (empty when there is none)."""
    found = []
    for part in extra.get(PARAMETER, "").split(","):
        name, sep, digest = part.rpartition(":")
        if sep and name.strip():
            found.append(ReferenceUse(name.strip(), digest.strip()))
    return tuple(found)


@dataclass
class ReferencePass:
    """Editing: the reference pictures encoded before the prompts by the family's ``rule``
    (:func:`convention_for`), their latents in every base sampler's conditioning
    (:meth:`References.attach`)."""

    pictures: tuple[ReferencePicture, ...]
    rule: ReferenceConvention
    kind: str = "references"
    contribution: Contribution = field(default_factory=Contribution)

    def __post_init__(self) -> None:
        self.contribution.parameters = {PARAMETER: parameter_text(self.pictures)}
        if isinstance(self.rule, OwnSize):
            self.contribution.parameters[SIZE_PARAMETER] = "own"

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        plan.prepare.append(EncodeReferences(self.pictures, self.rule))
