"""X/Y/Z grids (A1111's "X/Y/Z plot"): axes over one request, one job per cell.

An axis is ``NAME:V1,V2,...`` with NAME one of :data:`AXES`. Each cell is the base request with
the axis values applied; strength axes do not change the request's LoRA list but give the cell the
first LoRA's strengths, which the worker sets live (side paths, no re-bake) as a sweep does.
Cells are ordered checkpoint first, so a worker loads each checkpoint once for the whole grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import LoadoutError
from core.generate.request import MAX_SEED, GenerateRequest
from core.sampling import SAMPLERS, SCHEDULERS
from core.values import CLIP_SKIP

AXES = (
    "seed", "steps", "cfg", "sampler", "scheduler", "lora-strength", "lora-model-strength",
    "lora-clip-strength", "checkpoint", "prompt-sr", "clip-skip",
)  # fmt: skip
_SHORT = {"seed": "seed", "steps": "steps", "cfg": "cfg", "lora-strength": "lora", "clip-skip": "clip skip",
          "lora-model-strength": "lora model", "lora-clip-strength": "lora clip"}  # fmt: skip
_LORA_AXES = ("lora-strength", "lora-model-strength", "lora-clip-strength")
Value = int | float | str


def _bad(what: str, fix: str) -> LoadoutError:
    return LoadoutError(what, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Value, ...]

    def label(self, i: int) -> str:
        """What the grid writes for value ``i``: numbers with their axis ("cfg 7", "lora 0.5"),
        names as they are."""
        v = self.values[i]
        if self.name == "checkpoint":
            return Path(str(v)).stem
        number = _SHORT.get(self.name)
        text = f"{v:g}" if isinstance(v, float) else str(v)
        return f"{number} {text}" if number else text


def _number(name: str, text: str, kind: type[int] | type[float]) -> Value:
    try:
        return kind(text)
    except ValueError:
        raise _bad(f"{name} value {text!r} is not a number", f"Write it like {name}:1,2,3") from None


def parse_axis(text: str) -> Axis:
    """``seed:1,2,3`` -> an :class:`Axis` with typed, checked values."""
    name, sep, rest = text.partition(":")
    name = name.strip().lower()
    if not sep or name not in AXES:
        raise _bad(f"{text!r} is not an axis", f"Write AXIS:V1,V2,... with AXIS one of {', '.join(AXES)}")
    raw = [v.strip() for v in rest.split(",")]
    if name != "prompt-sr":
        raw = [v for v in raw if v]
    if len(raw) < 1 or (name == "prompt-sr" and len(raw) < 2) or len(raw) > 64:
        raise _bad(
            f"the {name} axis has {len(raw)} values",
            "Give 1 to 64 values (prompt-sr: the searched text, then each replacement)",
        )
    values: list[Value]
    if name in ("seed", "steps", "clip-skip"):
        values = [_number(name, v, int) for v in raw]
        low, high = {"seed": (0, MAX_SEED), "steps": (1, 10_000)}.get(
            name, (int(CLIP_SKIP.lo), int(CLIP_SKIP.hi))
        )
        if any(not low <= int(v) <= high for v in values):
            raise _bad(f"a {name} value is outside {low}..{high}", f"Give {name} values in that range")
    elif name == "cfg" or name in _LORA_AXES:
        values = [_number(name, v, float) for v in raw]
    elif name == "sampler" or name == "scheduler":
        known = SAMPLERS if name == "sampler" else SCHEDULERS
        unknown = [v for v in raw if v not in known]
        if unknown:
            raise _bad(f"unknown {name} {unknown[0]!r}", f"Use one of {', '.join(known)}")
        values = list(raw)
    elif name == "checkpoint":
        missing = [v for v in raw if not Path(v).is_file()]
        if missing:
            raise LoadoutError(
                f"{missing[0]} does not exist", fix="Check the checkpoint paths", code="not_found"
            )
        values = list(raw)
    else:
        values = list(raw)
    return Axis(name, tuple(values))


@dataclass(frozen=True)
class Cell:
    """One picture of a grid: its place, its labels and the request that makes it."""

    x: int
    y: int
    z: int
    request: GenerateRequest
    lora_strengths: tuple[float, float] | None = None  # the first LoRA's (model, clip), set live
    labels: tuple[str, str, str] = ("", "", "")


def _apply(
    axis: Axis, i: int, request: GenerateRequest, strengths: tuple[float, float] | None, search: str
) -> tuple[GenerateRequest, tuple[float, float] | None]:
    v = axis.values[i]
    image = request.image
    s = image.sampling
    if axis.name == "seed":
        image = replace(image, sampling=replace(s, seed=int(v)))
    elif axis.name == "steps":
        image = replace(image, sampling=replace(s, steps=int(v)))
    elif axis.name == "cfg":
        image = replace(image, sampling=replace(s, cfg=float(v)))
    elif axis.name == "sampler":
        image = replace(image, sampling=replace(s, sampler=str(v)))
    elif axis.name == "scheduler":
        image = replace(image, sampling=replace(s, scheduler=str(v)))
    elif axis.name == "clip-skip":
        image = replace(image, clip_skip=int(v))
    elif axis.name == "prompt-sr":
        image = replace(image, prompt=image.prompt.replace(search, str(v)))
    elif axis.name == "checkpoint":
        return replace(request, models=replace(request.models, checkpoint=Path(str(v)))), strengths
    else:
        assert strengths is not None
        m, c = strengths
        f = float(v)
        strengths = (f, f) if axis.name == "lora-strength" else (f, c) if "model" in axis.name else (m, f)
        return request, strengths
    if axis.name in request.family_defaults:  # the axis sets it: no longer the family's to give
        kept = tuple(n for n in request.family_defaults if n != axis.name)
        return replace(request, image=image, family_defaults=kept), strengths
    return replace(request, image=image), strengths


def _check(base: GenerateRequest, axes: Sequence[Axis]) -> None:
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise _bad("the same axis is given twice", "Give each axis once across the x, y and z axes")
    for a in axes:
        if a.name in _LORA_AXES and not base.loras:
            raise _bad(f"a {a.name} axis needs a LoRA", "Add a LoRA file to the stack")
        if a.name == "prompt-sr" and str(a.values[0]) not in base.image.prompt:
            raise _bad(
                f"the prompt does not contain {a.values[0]!r}",
                "Prompt S/R searches the prompt for its first value: use words the prompt has",
            )
        if a.name == "checkpoint" and base.models.diffusion_model is not None:
            raise _bad(
                "a checkpoint axis with a separate diffusion model", "Give checkpoints, not a diffusion model"
            )


def cells(base: GenerateRequest, x: Axis, y: Axis | None = None, z: Axis | None = None) -> list[Cell]:
    """Every cell of the grid, ordered so that model swaps are fewest: checkpoint first, then Z, Y, X."""
    axes = [a for a in (x, y, z) if a is not None]
    _check(base, axes)
    first = base.loras[0] if base.loras else None
    strengths0 = (first.model, first.model if first.clip is None else first.clip) if first else None
    out: list[Cell] = []
    sizes = [len(a.values) if a is not None else 1 for a in (x, y, z)]
    for iz in range(sizes[2]):
        for iy in range(sizes[1]):
            for ix in range(sizes[0]):
                request, strengths = base, strengths0
                labels = ["", "", ""]
                for k, (axis, i) in enumerate(((x, ix), (y, iy), (z, iz))):
                    if axis is None:
                        continue
                    search = str(axis.values[0])
                    request, strengths = _apply(axis, i, request, strengths, search)
                    labels[k] = axis.label(i)
                live = (
                    strengths if strengths != strengths0 or any(a.name in _LORA_AXES for a in axes) else None
                )
                out.append(Cell(ix, iy, iz, request, live, (labels[0], labels[1], labels[2])))
    order = {p: i for i, p in enumerate(dict.fromkeys(c.request.models.checkpoint for c in out))}
    return sorted(out, key=lambda c: (order[c.request.models.checkpoint], c.z, c.y, c.x))
