"""Regions written as text: one region in a line (``[negative:]X,Y,W,H[:STRENGTH][@START-END]=PROMPT``,
``negative:`` for a region of the negative prompt), and a list of regions as JSON (a file of them,
and the pictures' parameters)::

    [{"prompt": "a red hat", "box": [64, 0, 256, 192], "strength": 0.8, "start": 0, "end": 0.6},
     {"prompt": "a cat", "box": [0.5, 0.5, 0.5, 0.5], "fractions": true},
     {"prompt": "a lake", "mask": "lake.png", "mask_bounds": true},
     {"prompt": "blurry", "box": [0, 0, 256, 256], "negative": true}]

A line's box is in pixels, or in fractions of the picture when a number has a decimal point
(``0.5,0,0.5,1``). In JSON, ``box`` is ``[x, y, width, height]``, in fractions with
``"fractions": true``; ``mask`` a picture (white = the region) whose path is taken from the folder
given (the JSON file's); the other keys default to strength 1, the whole schedule, no mask bounds,
the positive prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import LoadoutError
from core.regions.region import Box, Region

_LINE = re.compile(
    r"\s*(?P<box>[^:@=]+?)\s*(?::\s*(?P<strength>[^@=]+?)\s*)?(?:@\s*(?P<start>[^-=]+)-(?P<end>[^=]+?)\s*)?=(?P<prompt>.*)",
    re.DOTALL,
)
_KEYS = {"prompt", "box", "fractions", "mask", "strength", "mask_bounds", "start", "end", "negative"}
#: what starts a line of a region of the negative prompt
NEGATIVE = "negative:"


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _bad(
            f"{what} {text.strip()!r} is not a number", "regions are written with numbers", "Write a number"
        ) from None


def parse_region(text: str) -> Region:
    """One region from ``[negative:]X,Y,W,H[:STRENGTH][@START-END]=PROMPT``."""
    negative = text.lstrip().lower().startswith(NEGATIVE)
    if negative:
        text = text.lstrip()[len(NEGATIVE) :]
    m = _LINE.fullmatch(text)
    if m is None:
        raise _bad(
            f"{text[:60]!r} is not a region",
            "a region is written X,Y,W,H[:STRENGTH][@START-END]=PROMPT",
            "Write e.g. 0,0,256,512:0.8@0-0.6=a red hat",
        )
    parts = m.group("box").split(",")
    if len(parts) != 4:
        raise _bad(
            f"the region box {m.group('box')!r} is not four numbers",
            "a box is X,Y,WIDTH,HEIGHT",
            "Write four",
        )
    fractions = "." in m.group("box")
    values = [_number(p, "a region's box value") for p in parts]
    x, y, w, h = values if fractions else [int(v) if v.is_integer() else v for v in values]
    box = Box(x, y, w, h, fractions=fractions)
    strength = 1.0 if m.group("strength") is None else _number(m.group("strength"), "a region's strength")
    start = 0.0 if m.group("start") is None else _number(m.group("start"), "a region's start")
    end = 1.0 if m.group("end") is None else _number(m.group("end"), "a region's end")
    return Region(m.group("prompt").strip(), box, None, strength, False, start, end, negative)


def region_from_json(data: object, folder: Path | None = None) -> Region:
    """One region from its JSON object (``mask`` paths taken from ``folder`` when relative)."""
    if not isinstance(data, dict):
        raise _bad(
            "a region is not a JSON object", 'each region is {"prompt": ..., "box": [...]}', "Fix the file"
        )
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise _bad(
            f"unknown region keys {unknown}",
            f"a region has the keys {sorted(_KEYS)}",
            "Remove or rename them",
        )
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise _bad("a region has no prompt", "each region is drawn from its own prompt", 'Give it a "prompt"')
    box = None
    if data.get("box") is not None:
        values = data["box"]
        if not isinstance(values, list) or len(values) != 4 or not all(_is_number(v) for v in values):
            raise _bad(
                f"the region box {values!r} is not four numbers", "a box is [x, y, width, height]", "Fix it"
            )
        box = Box(values[0], values[1], values[2], values[3], fractions=_flag(data, "fractions"))
    mask = data.get("mask")
    if mask is not None and not isinstance(mask, str):
        raise _bad(f"the region mask {mask!r} is not a file name", "a mask is a picture's path", "Fix it")
    mask_path = None if mask is None else (Path(mask) if folder is None else folder / mask)
    numbers = {k: data.get(k, d) for k, d in (("strength", 1.0), ("start", 0.0), ("end", 1.0))}
    for key, value in numbers.items():
        if not _is_number(value):
            raise _bad(f"the region's {key} {value!r} is not a number", "it is a number", "Fix it")
    return Region(
        prompt,
        box,
        mask_path,
        numbers["strength"],
        _flag(data, "mask_bounds"),
        numbers["start"],
        numbers["end"],
        _flag(data, "negative"),
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise _bad(
            f"the region's {key} {value!r} is not true or false", "it is a JSON true or false", "Fix it"
        )
    return value


def regions_from_json(text: str, folder: Path | None = None) -> tuple[Region, ...]:
    """A JSON list of regions (see the module docstring)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad("the regions are not JSON", str(exc), "Write a JSON list of regions") from None
    except RecursionError:
        raise _bad(
            "the regions are nested too deeply", "a regions list is flat", "Write a JSON list"
        ) from None
    if not isinstance(data, list):
        raise _bad(
            "the regions are not a JSON list", "the file holds [region, ...]", "Put the regions in a list"
        )
    return tuple(region_from_json(item, folder) for item in data)


def region_to_json(region: Region) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt": region.prompt}
    if region.box is not None:
        b = region.box
        out["box"] = [b.x, b.y, b.width, b.height]
        if b.fractions:
            out["fractions"] = True
    if region.mask is not None:
        out["mask"] = str(region.mask)
    if region.mask_bounds:
        out["mask_bounds"] = True
    if region.strength != 1.0:
        out["strength"] = region.strength
    if not region.whole_range:
        out["start"], out["end"] = region.start, region.end
    if region.negative:
        out["negative"] = True
    return out


def regions_to_json(regions: Sequence[Region]) -> str:
    """The regions as one line of JSON (the pictures' parameters)."""
    return json.dumps([region_to_json(r) for r in regions], ensure_ascii=False, separators=(",", ":"))
