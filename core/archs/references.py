"""Reference pictures for editing models: how a family scales each picture before its VAE encodes
it (a :class:`ReferenceConvention` an architecture package gives; a family record names it by id,
``DiffusionSpec.references``), and what the prompt encoding may see of the pictures
(:class:`PromptPictures`).

The rules are ComfyUI's nodes, as its templates wire them:

* FLUX.1 Kontext (``FluxKontextImageScale``): the preferred resolution whose aspect ratio is
  closest to the picture's, Lanczos, centre crop (:class:`PreferredSizes`);
* FLUX.2 (``ImageScaleToTotalPixels``) and Qwen-Image-Edit (``TextEncodeQwenImageEditPlus``): the
  size of a fixed area with the picture's aspect ratio, rounded (to a multiple of ``step``), no
  crop (:class:`TotalArea`).

A generation may keep each picture at its own size instead (:class:`OwnSize`: ComfyUI's edit
templates with the scale node left out, as artists do to edit at the picture's own resolution or to
skip the ~1 megapixel of reference tokens).

The scaled picture is then cropped to a multiple of the VAE's downscale around its centre, as
ComfyUI's ``VAE.encode`` does, encoded, and its latent (in the model's space) goes into
:attr:`core.archs.conditioning.Conditioning.references`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


@dataclass(frozen=True)
class ReferenceScale:
    """The size a reference picture is scaled to, ComfyUI's ``common_upscale`` method for it
    (``lanczos``, ``area``, ``bicubic``, ``bilinear``, ``nearest-exact``; ``none``: not resampled)
    and whether the picture is first cropped around its centre to the new aspect ratio
    (``"center"``) or stretched."""

    width: int
    height: int
    method: str
    crop: bool = False


class ReferenceConvention(Protocol):
    """How a family takes reference pictures (``DiffusionSpec.references`` names it by :attr:`id`)."""

    @property
    def id(self) -> str: ...

    @property
    def most(self) -> int:
        """The most pictures the family takes."""
        ...

    @property
    def negative(self) -> bool:
        """Whether the negative prompt's conditioning carries the references too (as the
        family's ComfyUI template wires it)."""
        ...

    def scale(self, width: int, height: int) -> ReferenceScale:
        """The size a ``width`` x ``height`` picture is scaled to, and how."""
        ...


@dataclass(frozen=True)
class PreferredSizes:
    """The listed size whose aspect ratio is closest to the picture's (the first on a tie, as
    ``min`` over ``(difference, width, height)`` picks it)."""

    id: str
    sizes: tuple[tuple[int, int], ...]
    most: int = 1
    negative: bool = True
    method: str = "lanczos"

    def scale(self, width: int, height: int) -> ReferenceScale:
        aspect = width / height
        _, w, h = min((abs(aspect - w / h), w, h) for w, h in self.sizes)
        return ReferenceScale(w, h, self.method, crop=True)


@dataclass(frozen=True)
class TotalArea:
    """The picture scaled to ``area`` pixels with its aspect ratio: each side
    ``round(side * sqrt(area / (w * h)) / step) * step``."""

    id: str
    area: int
    most: int
    step: int = 1
    negative: bool = True
    method: str = "area"

    def scale(self, width: int, height: int) -> ReferenceScale:
        by = math.sqrt(self.area / (width * height))
        w = max(round(width * by / self.step) * self.step, self.step)
        h = max(round(height * by / self.step) * self.step, self.step)
        return ReferenceScale(w, h, self.method)


@dataclass(frozen=True)
class OwnSize:
    """A family's convention with every picture kept at its own size, not resampled (its number of
    pictures and negative-prompt wiring unchanged): the VAE encoder still crops it to its multiple."""

    of: ReferenceConvention

    @property
    def id(self) -> str:
        return self.of.id

    @property
    def most(self) -> int:
        return self.of.most

    @property
    def negative(self) -> bool:
        return self.of.negative

    def scale(self, width: int, height: int) -> ReferenceScale:
        return ReferenceScale(width, height, "none")


@dataclass(frozen=True)
class AsGiven:
    """Pictures at their own size on both prompts, whatever the family (ComfyUI's ``VAEEncode`` and
    ``ReferenceLatent`` with no scale node): a control LoRA's control picture (DiffSynth's Qwen-Image
    In-Context Control Union); the VAE encoder still crops it to its multiple."""

    id: str
    most: int = 1
    negative: bool = True

    def scale(self, width: int, height: int) -> ReferenceScale:
        return ReferenceScale(width, height, "none")


@dataclass(frozen=True)
class PromptPictures:
    """The reference pictures as the prompt encoding may see them: each ``[1, 3, H, W]`` float32
    in [0, 1], as read (before the family's reference scaling: a vision tower scales them its own
    way, Qwen-Image-Edit's to 384x384 pixels of area), and their SHA-256 digests (what the prompt
    cache tells them apart by). A text convention whose ``pictures`` is True gets them; the others
    never see them (their prompt encoding does not depend on them)."""

    images: tuple[Tensor, ...] = ()
    digests: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.images)


NO_PICTURES = PromptPictures()
