"""Command-line text -> typed values: the one place ``loadout``'s arguments are parsed.

Each function turns one argument's text into the value the engine takes, through the number
checks of :mod:`core.values` (so the command line, the window and a picture's parameters accept the
same ranges), raising :class:`~core.values.BadValueError` with the allowed range. The ``*_type``
helpers are argparse ``type=`` callables: a refused value is reported by the CLI entry as every
other error (``loadout: ...``, exit 2), never as argparse's usage dump.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from core.errors import LoadoutError
from core.generate.workflow_request import ControlNetUse, ControlPictureUse
from core.guidance import GuidancePatch, parse_patch
from core.patching.block_weights import BlockWeights
from core.patching.merge import LoraArg
from core.patching.prompt_target import check_target
from core.preprocess import preprocessor_named
from core.regions import Region
from core.regions.text import parse_region, regions_from_json
from core.values import (
    CONTROLNET_PERCENT,
    CONTROLNET_STRENGTH,
    LORA_STRENGTH,
    SIDE,
    VRAM_LIMIT,
    BadValueError,
    GiB,
    MiB,
    NumberRange,
    check_size,
)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}  # fmt: skip

#: sizes in bytes where 0 is a real answer (--reserve 0: keep nothing free)
BYTES = NumberRange(
    "a size in bytes", 0, 1 << 42, integer=True, in_bytes=True, hint="Write it like 4GiB or 512MiB"
)


DEVICE_HELP = "cpu, cuda or mps (default: the Mac's GPU, mps, where there is one; else cpu)"


def default_device(mps_available: Callable[[], bool] | None = None) -> str:
    """The device when ``--device`` is left out: a Mac's GPU (MPS) where torch has one, else the
    CPU. On a Mac the GPU shares the computer's memory, so using it costs nothing the CPU would
    have had, and it is what an artist expects; an NVIDIA card stays opt-in (``--device cuda``), as
    the command line has always behaved there."""
    if mps_available is None:
        import torch

        backend = getattr(torch.backends, "mps", None)
        mps_available = backend.is_available if backend is not None else (lambda: False)
    return "mps" if mps_available() else "cpu"


def parse_bytes(text: str, limits: NumberRange = VRAM_LIMIT) -> int:
    """``4GiB``, ``512MiB``, ``4294967296`` -> bytes within ``limits`` (``0``, ``-1``, ``inf`` and
    ``1e400`` are refused for a VRAM limit: they never silently mean "no limit")."""
    s = str(text).strip().lower()
    num = s.rstrip("kmgtib").strip()
    unit = s[len(s.rstrip("kmgtib")) :]
    if unit not in _UNITS or len(s) > 64:
        raise limits.error(f"{text!r} is not a size in bytes")
    try:
        value = float(num)
    except ValueError:
        raise limits.error(f"{text!r} is not a size in bytes") from None
    scaled = value * _UNITS[unit]
    if not math.isfinite(scaled):  # inf, nan, or 1e308 MiB overflowing
        raise limits.error(f"{limits.name} {text!r} is not a finite size")
    count = round(scaled)
    if limits.problem(count) is not None:
        raise limits.error(f"{limits.name} of {text.strip()} is out of range")
    return count


def parse_size(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` -> (width, height), each side checked (a multiple of 8, 64 to 16384, at most
    4096x4096 in area)."""
    parts = str(text).lower().split("x")
    if len(parts) != 2:
        raise BadValueError(f"size {text!r} is not WIDTHxHEIGHT", fix="Write it like 1024x1024")
    return check_size(SIDE.parse_int(parts[0]), SIDE.parse_int(parts[1]))


def parse_lora(text: str) -> LoraArg:
    """``FILE[:MODEL[:CLIP]][:lbw=WEIGHTS][:on=PROMPT]`` (``lbw=``: LoRA block weights, numbers or
    a preset name, as A1111's lora-block-weight tag; ``on=``: the prompt its model part acts on
    only, ``positive`` or ``negative``). Numbers are taken from the right so paths may hold
    colons; a last part that is not a number is part of the path only when that path exists
    (``F:abc`` with no file ``F:abc`` says the strength is not a number, not that ``F:abc`` does
    not exist)."""
    head, sep, tail = text.rpartition(":")
    option = tail.strip().lower()
    if sep and option.startswith(("lbw=", "on=")) and not Path(text).exists():
        plain = parse_lora(head)
        if option.startswith("on="):
            return replace(plain, on=check_target(tail.strip()[3:]))
        return replace(plain, block_weights=BlockWeights.parse(tail.strip()[4:]))
    parts = text.split(":")
    numbers: list[float] = []
    while len(parts) > 1 and len(numbers) < 2:
        tail = parts[-1]
        try:
            value = float(tail)
        except ValueError:
            head = ":".join(parts[:-1])
            if not Path(text).exists() and not numbers and Path(head).exists():
                raise LORA_STRENGTH.error(f"--lora {text}: the strength {tail!r} is not a number") from None
            break
        numbers.insert(0, LORA_STRENGTH.check(value))
        parts.pop()
    path = Path(":".join(parts))
    if len(numbers) == 2 and len(parts) > 1 and not path.exists():
        try:
            float(parts[-1])
        except ValueError:
            pass
        else:  # F:1:1:1 is a third strength, not a file named F:1
            raise LoadoutError(
                f"--lora {text}: too many strengths",
                why="a LoRA takes at most two: FILE[:MODEL_STRENGTH[:CLIP_STRENGTH]]",
                fix="Give at most two numbers after the file",
                code="bad_argument",
            )
    if not numbers:
        return LoraArg(path)
    return LoraArg(path, numbers[0], numbers[1] if len(numbers) > 1 else None)


def parse_blocks(text: str, limits: NumberRange) -> tuple[tuple[str, float], ...]:
    """``PREFIX=R,PREFIX=R`` (``--blocks``): per-block merge ratios, each block named by the start
    of its keys as ComfyUI's ModelMergeBlocks names it (``input_blocks.4.``, ``in``, ``out``)."""
    pairs: list[tuple[str, float]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, eq, value = item.rpartition("=")
        if not eq or not name.strip():
            raise LoadoutError(
                f"--blocks {text}: {item!r} is not BLOCK=RATIO",
                fix="Write blocks like in=0.2,middle_block.=0.5,out=1",
                code="bad_argument",
            )
        pairs.append((name.strip(), limits.parse(value)))
    if not pairs:
        raise LoadoutError(f"--blocks {text!r} names no block", fix="Write blocks like in=0.2,out=1",
                           code="bad_argument")  # fmt: skip
    return tuple(pairs)


def parse_controlnet(text: str) -> ControlNetUse:
    """``FILE:HINT[:STRENGTH[:START:END]]`` (``--controlnet``), or ``FILE:PICTURE:PREPROCESSOR[...]``
    (the hint made from PICTURE when the generation runs); a union ControlNet's control type as one
    more part ``type=NAME`` anywhere after the paths (as a LoRA's ``lbw=``). Windows drive letters
    (``C:\\...``) stay part of the paths. ``FILE`` alone or an empty HINT (``FILE::0.8``): no hint
    picture (a Z-Image Fun ControlNet 2.x inpainting on the picture to inpaint alone)."""
    parts = _split_paths(text)
    if len(parts) == 1:
        parts.append("")
    control_type = None
    typed = [i for i, p in enumerate(parts) if i >= 2 and p.strip().lower().startswith("type=")]
    if typed:
        control_type = parts.pop(typed[0]).strip()[5:].strip().lower() or None
    preprocessor = None
    if len(parts) >= 3 and preprocessor_named(parts[2]) is not None:
        preprocessor = preprocessor_named(parts.pop(2))
    if len(parts) not in (2, 3, 5):
        raise LoadoutError(
            f"--controlnet {text!r} is not FILE:HINT[:PREPROCESSOR][:STRENGTH[:START:END]]",
            why=f"it has {len(parts)} parts besides a preprocessor",
            fix="Give e.g. --controlnet canny.safetensors:edges.png:0.8:0:1 or "
            "--controlnet canny.safetensors:photo.png:canny:0.8",
            code="bad_argument",
        )
    ranges = (CONTROLNET_STRENGTH, CONTROLNET_PERCENT, CONTROLNET_PERCENT)
    nums = [r.parse(v) for r, v in zip(ranges, parts[2:], strict=False)]
    strength = nums[0] if nums else 1.0
    start, end = (nums[1], nums[2]) if len(nums) == 3 else (0.0, 1.0)
    hint = Path(parts[1]) if parts[1].strip() else None
    return ControlNetUse(Path(parts[0]), hint, strength, start, end, preprocessor, control_type)


def parse_control_picture(text: str) -> ControlPictureUse:
    """``PICTURE[:PREPROCESSOR]`` (``--control-picture``): a preprocessor name as the last part
    makes the picture from PICTURE; a Windows drive letter stays part of the path."""
    parts = _split_paths(text)
    if len(parts) >= 2 and preprocessor_named(parts[-1]) is not None:
        return ControlPictureUse(Path(":".join(parts[:-1])), preprocessor_named(parts[-1]))
    return ControlPictureUse(Path(text))


def parse_patch_argument(text: str) -> GuidancePatch:
    """``NAME[:ARG=VALUE,...]`` (``--patch``): a guidance patch with its parameters."""
    try:
        return parse_patch(text)
    except LoadoutError as exc:
        raise LoadoutError(
            f"--patch {text!r}: {exc.what}",
            why=exc.why,
            fix=f"{exc.fix} (e.g. --patch pag:scale=3 --patch freeu_v2)",
            code=exc.code,
        ) from None


def parse_region_argument(text: str) -> Region:
    """``[negative:]X,Y,W,H[:STRENGTH][@START-END]=PROMPT`` (``--region``): one region of the
    picture (``negative:``: of the negative prompt)."""
    try:
        return parse_region(text)
    except LoadoutError as exc:
        raise LoadoutError(
            f"--region {text[:60]!r}: {exc.what}",
            why=exc.why,
            fix=f"{exc.fix} (e.g. --region 0,0,256,512:0.8@0-0.6=a red hat)",
            code=exc.code,
        ) from None


#: the largest regions file read (a real one is a few hundred bytes)
REGIONS_FILE_BYTES = 1 << 20


def read_regions_file(path: Path) -> tuple[Region, ...]:
    """``--regions FILE``: a JSON list of regions; mask paths are taken from the file's folder."""
    try:
        with path.open("rb") as f:
            data = f.read(REGIONS_FILE_BYTES + 1)
    except OSError as exc:
        raise LoadoutError(
            f"the regions file {path} cannot be read", why=exc.strerror or str(exc),
            fix="Give the path of a JSON file of regions", code="bad_argument",
        ) from None  # fmt: skip
    if len(data) > REGIONS_FILE_BYTES:
        raise LoadoutError(
            f"the regions file {path} is over 1 MiB", why="a regions file is a short JSON list",
            fix="Give the JSON file of regions", code="bad_argument",
        )  # fmt: skip
    try:
        return regions_from_json(data.decode("utf-8"), path.parent)
    except UnicodeDecodeError:
        raise LoadoutError(
            f"the regions file {path} is not text", why="it must be a JSON list in UTF-8",
            fix="Give the JSON file of regions", code="bad_argument",
        ) from None  # fmt: skip
    except LoadoutError as exc:
        raise LoadoutError(f"{path}: {exc.what}", why=exc.why, fix=exc.fix, code=exc.code) from None


def _split_paths(text: str) -> list[str]:
    out: list[str] = []
    for piece in text.split(":"):
        # "C" then "\\x.png": a drive letter belongs to the next piece
        if out and len(out[-1]) == 1 and out[-1].isalpha() and piece.startswith(("\\", "/")):
            out[-1] = f"{out[-1]}:{piece}"
        else:
            out.append(piece)
    return out


def number_type(limits: NumberRange) -> Callable[[str], float]:
    """An argparse ``type=`` that checks the value against ``limits``."""

    def parse(text: str) -> float:
        return limits.parse(text)

    parse.__name__ = limits.name
    return parse


def int_type(limits: NumberRange) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return limits.parse_int(text)

    parse.__name__ = limits.name
    return parse
