"""A region of the picture with its own prompt: what an artist asks for, checked, with no tensors.

A region is ComfyUI's CLIPTextEncode of its ``prompt`` followed by

* ``ConditioningSetArea`` (a :class:`Box` in pixels) or ``ConditioningSetAreaPercentage`` (a box in
  fractions of the picture), with ``strength``; and/or
* ``ConditioningSetMask`` (a ``mask`` picture, white = the region; ``strength`` is the mask's when
  there is one, the box's strength then 1) with ``set_cond_area`` "default" or, with
  ``mask_bounds``, "mask bounds" (the region is run on the mask's bounding box only);
* ``ConditioningSetTimestepRange`` (``start``/``end`` as fractions of the schedule: 0 the first,
  noisiest step, 1 the last);

then ``ConditioningCombine`` with the positive prompt -- or, for a region ``negative``, with the
negative prompt (a part of the picture steered away from its own prompt) (the engine:
:mod:`core.regions.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import LoadoutError
from core.values import REGION_FRACTION, REGION_PERCENT, REGION_PIXELS, REGION_STRENGTH


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class Box:
    """``x, y`` the top-left corner, ``width`` x ``height`` the size: pixels (whole numbers), or
    fractions of the picture's width and height with ``fractions``."""

    x: float
    y: float
    width: float
    height: float
    fractions: bool = False

    def __post_init__(self) -> None:
        values = (self.x, self.y, self.width, self.height)
        if self.fractions:
            for v in values:
                REGION_FRACTION.check(v)
            if self.x + self.width > 1.0 + 1e-9 or self.y + self.height > 1.0 + 1e-9:
                raise _bad(
                    "a region's box reaches outside the picture",
                    f"x + width = {self.x + self.width:g} and y + height = {self.y + self.height:g} "
                    "must be at most 1 (the whole picture)",
                    "Give a box inside the picture",
                )
        elif any(REGION_PIXELS.problem(v) for v in values):
            raise _bad(
                f"a region's box {self.describe()} is not in whole pixels",
                f"a box in pixels is four whole numbers from 0 to {REGION_PIXELS.hi:g}",
                "Give x, y, width and height in pixels, or fractions of the picture",
            )
        if self.width <= 0 or self.height <= 0:
            raise _bad(
                f"a region's box {self.describe()} is empty",
                "its width and height must be above 0",
                "Give the box a size",
            )

    def describe(self) -> str:
        return ",".join(
            f"{v:g}" if abs(v) < 1e15 else "(too large)" for v in (self.x, self.y, self.width, self.height)
        )

    def problem_in(self, width: int, height: int) -> str | None:
        """Why this box does not fit a ``width`` x ``height`` picture (None when it does)."""
        if self.fractions:
            return None
        if self.x + self.width > width or self.y + self.height > height:
            return f"the region box {self.describe()} reaches outside the {width}x{height} picture"
        return None


@dataclass(frozen=True)
class Region:
    prompt: str
    box: Box | None = None
    mask: Path | None = None
    strength: float = 1.0
    #: ConditioningSetMask's "mask bounds": run the region on the mask's bounding box only
    mask_bounds: bool = False
    start: float = 0.0
    end: float = 1.0
    #: combined with the negative prompt instead of the positive
    negative: bool = False

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise _bad(
                "a region has an empty prompt", "each region is drawn from its own prompt", "Write its prompt"
            )
        if self.box is None and self.mask is None:
            raise _bad(
                f"the region {self.prompt!r} has neither a box nor a mask",
                "a region is a part of the picture",
                "Give it a box or a mask picture",
            )
        if self.mask_bounds and (self.mask is None or self.box is not None):
            raise _bad(
                f"the region {self.prompt!r} asks for mask bounds without a mask alone",
                "mask bounds make the mask's bounding box the region's box",
                "Give a mask and no box with mask bounds",
            )
        REGION_STRENGTH.check(self.strength)
        REGION_PERCENT.check(self.start)
        REGION_PERCENT.check(self.end)
        if self.start > self.end:
            raise _bad(
                f"the region {self.prompt!r} starts at {self.start:g}, after its end {self.end:g}",
                "a region acts from its start to its end fraction of the steps",
                "Give a start at or before the end",
            )

    @property
    def whole_range(self) -> bool:
        return self.start == 0.0 and self.end == 1.0
