"""Every number a user (or a file) hands the engine goes through one check: finite, in its range.

A :class:`NumberRange` per input class names the value, its bounds and whether it is whole. The
command line, the window's fields (their spin boxes take the same bounds), the parameters read back
from a picture, prompt weights and a file's training metadata all use it, so ``nan``, ``inf``,
``1e400``, ``99999999999999999999`` and ``-5`` are refused (or, for values read from a file, ignored
with a reason) the same way everywhere, with a message that names the allowed range.

:meth:`NumberRange.parse` reads text (``"1e400"`` overflows to ``inf`` and is refused; an integer
field refuses ``"2.5"``); :meth:`NumberRange.check` checks a number already typed (a float ``nan``
from a slider, a huge int from JSON); :meth:`NumberRange.problem` says what is wrong without raising.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import LoadoutError
from core.units import GIB, MIB, gib

GiB, MiB = GIB, MIB  # the names the byte parsers use


class BadValueError(LoadoutError):
    """A number outside its range, not finite, or not a number at all."""

    code = "bad_argument"


def _show(x: float, in_bytes: bool = False) -> str:
    if in_bytes:
        return gib(x)
    if isinstance(x, int):
        return str(x)
    return f"{int(x)}" if x.is_integer() and abs(x) < 1e18 else f"{x:g}"


@dataclass(frozen=True)
class NumberRange:
    """The allowed values of one kind of number (``lo``/``hi`` inclusive unless ``*_open``)."""

    name: str  # how the message names it: "LoRA strength", "steps"
    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    hint: str = ""  # e.g. "ComfyUI's range" or an example
    code: str = "bad_argument"
    in_bytes: bool = False  # bounds said as "64.00 MiB" rather than 67108864

    def describe(self) -> str:
        lo, hi = _show(self.lo, self.in_bytes), _show(self.hi, self.in_bytes)
        if self.lo_open:
            return f"above {lo} and at most {hi}"
        if self.in_bytes:
            return f"a size from {lo} to {hi}"
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} from {lo} to {hi}"

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not allowed, or None when it is."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{self.name} {value!r} is not a number"
        if self.integer and not isinstance(value, int) and not (math.isfinite(value) and value.is_integer()):
            return f"{self.name} {_show(value)} is not a whole number"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{self.name} {value} is not a finite number"
        low_ok = value > self.lo if self.lo_open else value >= self.lo
        if not low_ok or value > self.hi:
            return f"{self.name} {_show(value, self.in_bytes)} is out of range"
        return None

    def error(self, what: str) -> BadValueError:
        return BadValueError(
            what,
            why=f"{self.name} must be {self.describe()}",
            fix=self.hint,
            code=self.code,
        )

    def check(self, value: float) -> float:
        """``value`` when allowed (an integral float of a whole-number range becomes an int)."""
        why = self.problem(value)
        if why is not None:
            raise self.error(why)
        return int(value) if self.integer else value

    def check_int(self, value: int) -> int:
        checked = self.check(value)
        return int(checked)

    def parse(self, text: str) -> float:
        """``text`` as a number of this range (whole for an integer range), or :class:`BadValueError`."""
        s = str(text).strip()
        if len(s) > 64:  # int("9" * 5000) is slow and no allowed value is that long
            raise self.error(f"{self.name} {s[:20]}... is too long to be a number")
        try:
            value: float = int(s) if self.integer else float(s)
        except ValueError:
            if self.integer:
                try:
                    f = float(s)
                except ValueError:
                    f = math.nan
                if math.isfinite(f) and f.is_integer():
                    return self.check(f)
            raise self.error(f"{self.name} {s!r} is not a number") from None
        return self.check(value)

    def parse_int(self, text: str) -> int:
        return int(self.parse(text))


#: ComfyUI's widget ranges where it has one (KSampler, LoraLoader, FluxGuidance, EmptyLatentImage).
SEED = NumberRange("the seed", 0, (1 << 64) - 1, integer=True)
STEPS = NumberRange("steps", 1, 10_000, integer=True)
#: forward passes of `loadout run` (a timing loop, not a sampler: long runs are how it is used)
RUN_STEPS = NumberRange("test-run steps", 1, 10_000_000, integer=True)
CFG = NumberRange("CFG", 0.0, 100.0)
GUIDANCE = NumberRange("guidance", 0.0, 100.0)
DENOISE = NumberRange("denoise", 0.0, 1.0, lo_open=True)
#: ComfyUI's ControlNetApplyAdvanced: strength 0..10, start/end percent 0..1; A1111's refiner "switch at"
CONTROLNET_STRENGTH = NumberRange("a ControlNet strength", 0.0, 10.0, hint="Give e.g. 1 (0 switches it off)")
#: ComfyUI's StyleModelApply strength (FLUX Redux)
REDUX_STRENGTH = NumberRange("a Redux strength", 0.0, 10.0, hint="Give e.g. 1 (0 leaves the picture out)")
CONTROLNET_PERCENT = NumberRange(
    "a ControlNet start/end percent", 0.0, 1.0, hint="0 is the first step, 1 the last: e.g. 0:0.6"
)
#: ComfyUI_IPAdapter_plus's IPAdapterAdvanced: weight -1..5, start/end percent 0..1
IP_ADAPTER_WEIGHT = NumberRange("an IP-Adapter weight", -1.0, 5.0, hint="Give e.g. 0.8 (0 switches it off)")
#: ComfyUI_IPAdapter_plus's style_boost / composition_boost (the precise weight types)
IP_ADAPTER_BOOST = NumberRange("an IP-Adapter boost", -5.0, 5.0, hint="Give e.g. 1 (the node pack's range)")
#: ComfyUI_IPAdapter_plus's weight_faceidv2 (IPAdapterFaceID: -1 to 5)
IP_ADAPTER_FACE_WEIGHT = NumberRange(
    "a FaceID face weight", -1.0, 5.0, hint="Give e.g. 1.5 (the node pack's range)"
)
IP_ADAPTER_PERCENT = NumberRange(
    "an IP-Adapter start/end percent", 0.0, 1.0, hint="0 is the first step, 1 the last: e.g. 0-0.8"
)
REFINER_SWITCH = NumberRange(
    "the refiner switch", 0.0, 0.99, lo_open=True, hint="Give a fraction between 0 and 1, e.g. 0.8"
)
LORA_STRENGTH = NumberRange("a LoRA strength", -100.0, 100.0)
#: ComfyUI's ModelMergeSimple / ModelMergeBlocks ratio (model A's share) and its
#: ModelMergeSubtract multiplier
MERGE_RATIO = NumberRange("a merge ratio", 0.0, 1.0, hint="1 keeps model A, 0 takes model B")
MERGE_MULTIPLIER = NumberRange(
    "a merge multiplier", -10.0, 10.0, hint="ComfyUI's range; 1 adds the whole difference"
)
#: ComfyUI's ConditioningSetArea / SetMask strength and SetTimestepRange / SetAreaPercentage values
REGION_STRENGTH = NumberRange("a region's strength", 0.0, 10.0, hint="Give e.g. 1 (0 switches it off)")
REGION_PERCENT = NumberRange(
    "a region's start/end", 0.0, 1.0, hint="0 is the first step, 1 the last: e.g. 0-0.6"
)
REGION_PIXELS = NumberRange("a region's box value in pixels", 0, 16384, integer=True)
REGION_FRACTION = NumberRange("a region's fraction of the picture", 0.0, 1.0, hint="Give e.g. 0.5 for half")
PROMPT_WEIGHT = NumberRange(
    "a prompt weight", -100.0, 100.0, hint="Write weights like (word:1.2)", code="bad_prompt_weight"
)
SIDE = NumberRange("a picture side", 64, 16384, integer=True)
MAX_AREA = 4096 * 4096
BATCH = NumberRange("the batch size", 1, 64, integer=True)
#: A1111's "Clip skip" (1: the last layer, 2: the penultimate; ComfyUI's CLIPSetLastLayer -N)
CLIP_SKIP = NumberRange("clip skip", 1, 24, integer=True, hint="1 is the last layer, 2 the penultimate")
VRAM_LIMIT = NumberRange(
    "a VRAM limit", MiB, 1 << 42, integer=True, in_bytes=True,
    hint="Give the card size to simulate, like 4GiB, 512MiB or 4294967296; leave it out for no limit",
)  # fmt: skip
#: counts read from a file's training metadata (kohya ss_*): anything past this is not a real count
METADATA_COUNT = NumberRange("a count", 0, 1 << 53, integer=True)


def check_size(width: int, height: int) -> tuple[int, int]:
    """A picture's size: each side in :data:`SIDE`, a multiple of 8, at most :data:`MAX_AREA` pixels."""
    for side in (width, height):
        SIDE.check(side)
    if width % 8 or height % 8:
        raise BadValueError(
            f"size {width}x{height}: both sides must be multiples of 8",
            why="the latent is an eighth of the picture on each side",
            fix="Use sides like 512, 768 or 1024",
        )
    if width * height > MAX_AREA:
        raise BadValueError(
            f"size {width}x{height} is larger than 4096x4096 in area",
            why="a picture that large needs more memory than any card has for one latent",
            fix="Generate smaller and upscale",
        )
    return width, height
