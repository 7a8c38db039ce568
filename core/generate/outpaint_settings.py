"""What outpainting is asked for: the pixels each side grows by and the feathering, as ComfyUI's
ImagePadForOutpaint takes them. Pure data; the pass itself is :mod:`core.generate.outpaint`."""

from __future__ import annotations

from dataclasses import dataclass

from core.values import BadValueError, NumberRange

#: ImagePadForOutpaint's default feathering (pixels)
DEFAULT_FEATHERING = 40
#: the most pixels a side may grow by (ComfyUI's MAX_RESOLUTION)
MAX_GROWTH = 16384
GROWTH = NumberRange("pixels a side grows by", 0, MAX_GROWTH, integer=True)
FEATHERING = NumberRange("the outpainting feathering", 0, MAX_GROWTH, integer=True)


@dataclass(frozen=True)
class Outpaint:
    left: int = 0
    top: int = 0
    right: int = 0
    bottom: int = 0
    feathering: int = DEFAULT_FEATHERING

    @property
    def sides(self) -> tuple[int, int, int, int]:
        return self.left, self.top, self.right, self.bottom

    def problems(self) -> list[str]:
        out = []
        if any(not 0 <= s <= MAX_GROWTH for s in self.sides):
            out.append(f"each side grows by 0 to {MAX_GROWTH} pixels, not {self.sides}")
        elif not any(self.sides):
            out.append("outpainting grows at least one side by at least one pixel")
        if not 0 <= self.feathering <= MAX_GROWTH:
            out.append(f"the feathering must be between 0 and {MAX_GROWTH} pixels, not {self.feathering}")
        return out

    @property
    def label(self) -> str:
        """Its PNG text: ``left,top,right,bottom`` (the feathering is written beside it)."""
        return ",".join(str(s) for s in self.sides)

    def grown(self, width: int, height: int) -> tuple[int, int]:
        """The padded picture's (width, height)."""
        return width + self.left + self.right, height + self.top + self.bottom


def parse_sides(text: str, feathering: int = DEFAULT_FEATHERING) -> Outpaint:
    """``left,top,right,bottom`` (pixels) -> an Outpaint, each side checked."""
    parts = str(text).split(",")
    if len(parts) != 4:
        raise BadValueError(
            f"outpainting sides {text!r} are not four numbers of pixels",
            fix="Write them as left,top,right,bottom, e.g. 0,0,256,0 to grow the right side by 256",
        )
    left, top, right, bottom = (GROWTH.parse_int(p) for p in parts)
    found = Outpaint(left, top, right, bottom, FEATHERING.check_int(feathering))
    if problems := found.problems():
        raise BadValueError("; ".join(problems), fix="Grow at least one side, e.g. 0,0,256,0")
    return found


#: the PNG items (Loadout's own keys; A1111 has none for outpainting)
OUTPAINT_KEY, FEATHERING_KEY = "Outpaint", "Outpaint feathering"


def outpaint_parameters(outpaint: Outpaint) -> dict[str, str]:
    """``Outpaint: "left,top,right,bottom", Outpaint feathering: N``."""
    return {OUTPAINT_KEY: outpaint.label, FEATHERING_KEY: str(outpaint.feathering)}


def outpaint_in(extra: dict[str, str]) -> Outpaint | None:
    """The outpainting an infotext's extra keys name; None when none is named or it does not read
    as four whole numbers of pixels (and a whole feathering) in range."""
    text = extra.get(OUTPAINT_KEY)
    if text is None:
        return None
    try:
        sides = [int(s) for s in text.split(",")]
        feathering = int(extra.get(FEATHERING_KEY, str(DEFAULT_FEATHERING)))
    except ValueError:
        return None
    if len(sides) != 4:
        return None
    found = Outpaint(sides[0], sides[1], sides[2], sides[3], feathering)
    return None if found.problems() else found
