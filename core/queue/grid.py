"""X/Y/Z grids (A1111's "X/Y/Z plot"): axes over one request, one picture per cell.

An axis is ``NAME:V1,V2,...`` with NAME one of :data:`AXES`. Each cell is the base settings with
the axis values applied; strength axes do not change the LoRA list but give the cell one LoRA's
strengths (the first's in a queued grid), which are set live (side paths, no re-bake). A LoRA
strength sweep is a grid with one such axis, run on the session at hand (core.queue.session_grid).
A ``controlnet-strength`` axis sets the first ControlNet's strength (sd-webui-controlnet's axis sets
unit 0's weight), each cell a plain generation at that strength; ``ip-adapter-weight`` and
``ip-adapter-type`` set the first image prompt's weight and weight type (a type that has no
composition picture or boost leaves those out), ``ip-adapter-scaling`` its embeds scaling;
``redux-strength`` the first FLUX Redux
picture's strength.
Cells are ordered checkpoint first, so a worker loads each checkpoint once for the whole grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import LoadoutError
from core.generate.ip_embeds import EMBEDS_SCALINGS
from core.generate.ip_weights import COMPOSITION_TYPES, PRECISE_TYPES, WEIGHT_TYPES
from core.generate.request import MAX_SEED, GenerateRequest, ImageSettings
from core.generate.workflow_request import IpAdapterUse
from core.sampling import SAMPLERS, SCHEDULERS
from core.values import (
    CLIP_SKIP,
    CONTROLNET_STRENGTH,
    IP_ADAPTER_WEIGHT,
    LORA_STRENGTH,
    REDUX_STRENGTH,
)

AXES = (
    "seed", "steps", "cfg", "sampler", "scheduler", "lora-strength", "lora-model-strength",
    "lora-clip-strength", "checkpoint", "prompt-sr", "clip-skip", "controlnet-strength",
    "ip-adapter-weight", "ip-adapter-type", "ip-adapter-scaling", "redux-strength",
)  # fmt: skip
_SHORT = {"seed": "seed", "steps": "steps", "cfg": "cfg", "lora-strength": "lora", "clip-skip": "clip skip",
          "lora-model-strength": "lora model", "lora-clip-strength": "lora clip",
          "controlnet-strength": "controlnet", "ip-adapter-weight": "ip-adapter",
          "redux-strength": "redux"}  # fmt: skip
#: the axes that set the first image prompt (``--ip-adapter``)
IP_ADAPTER_AXES = ("ip-adapter-weight", "ip-adapter-type", "ip-adapter-scaling")
LORA_AXES = ("lora-strength", "lora-model-strength", "lora-clip-strength")
Value = int | float | str


def _bad(what: str, fix: str) -> LoadoutError:
    return LoadoutError(what, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Value, ...]

    def label(self, i: int, lora: str = "") -> str:
        """What the grid writes for value ``i``: numbers with their axis ("cfg 7", "lora 0.5"; a
        strength axis says the LoRA's name when given: "style 0.5", "style model 0.5"), names as
        they are."""
        v = self.values[i]
        if self.name == "checkpoint":
            return Path(str(v)).stem
        number = _SHORT.get(self.name)
        if number and lora and self.name in LORA_AXES:
            number = lora + number.removeprefix("lora")
        text = f"{v:g}" if isinstance(v, float) else str(v)
        return f"{number} {text}" if number else text


def _number(name: str, text: str, kind: type[int] | type[float]) -> Value:
    try:
        return kind(text)
    except ValueError:
        raise _bad(f"{name} value {text!r} is not a number", "Give numbers like 1, 2, 3") from None


def parse_axis(text: str) -> Axis:
    """``seed:1,2,3`` -> an :class:`Axis` with typed, checked values."""
    name, sep, rest = text.partition(":")
    name = name.strip().lower()
    if not sep or name not in AXES:
        raise _bad(f"{text!r} is not an axis", f"Write AXIS:V1,V2,... with AXIS one of {', '.join(AXES)}")
    return axis_of(name, rest)


def axis_of(name: str, text: str) -> Axis:
    """The axis ``name`` (one of :data:`AXES`) over the values in ``text`` ("0.4, 0.7, 1.0")."""
    if name not in AXES:
        raise _bad(f"{name!r} is not an axis", f"Use one of {', '.join(AXES)}")
    raw = [v.strip() for v in text.split(",")]
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
    elif name == "cfg":
        values = [_number(name, v, float) for v in raw]
    elif name in LORA_AXES:
        values = [LORA_STRENGTH.parse(v) for v in raw]
    elif name == "controlnet-strength":
        values = [CONTROLNET_STRENGTH.parse(v) for v in raw]
    elif name == "ip-adapter-weight":
        values = [IP_ADAPTER_WEIGHT.parse(v) for v in raw]
    elif name == "redux-strength":
        values = [REDUX_STRENGTH.parse(v) for v in raw]
    elif name == "ip-adapter-type":
        unknown = [v for v in raw if v not in WEIGHT_TYPES]
        if unknown:
            said = ", ".join(WEIGHT_TYPES)
            raise _bad(f"unknown IP-Adapter weight type {unknown[0]!r}", f"Use one of {said}")
        values = list(raw)
    elif name == "ip-adapter-scaling":
        unknown = [v for v in raw if v not in EMBEDS_SCALINGS]
        if unknown:
            said = ", ".join(EMBEDS_SCALINGS)
            raise _bad(f"unknown IP-Adapter embeds scaling {unknown[0]!r}", f"Use one of {said}")
        values = list(raw)
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


Strengths = tuple[float, float]  # one LoRA's (model, text encoder)


@dataclass(frozen=True)
class Cell:
    """One picture of a grid: its place, its labels and the request that makes it."""

    x: int
    y: int
    z: int
    request: GenerateRequest
    lora_strengths: Strengths | None = None  # the first LoRA's (model, clip), set live
    labels: tuple[str, str, str] = ("", "", "")


@dataclass(frozen=True)
class ImageCell:
    """One picture of a grid on the models at hand (no checkpoint axis): its settings and the
    strengths its LoRA is set to live (None: as it is on the stack)."""

    x: int
    y: int
    z: int
    image: ImageSettings
    lora_strengths: Strengths | None = None
    labels: tuple[str, str, str] = ("", "", "")
    values: tuple[Value | None, Value | None, Value | None] = (None, None, None)


def _apply_image(
    axis: Axis, i: int, image: ImageSettings, strengths: Strengths | None
) -> tuple[ImageSettings, Strengths | None]:
    """Value ``i`` of ``axis`` (any but a checkpoint axis) applied to ``image`` and the strengths."""
    v = axis.values[i]
    s = image.sampling
    if axis.name == "seed":
        return replace(image, sampling=replace(s, seed=int(v))), strengths
    if axis.name == "steps":
        return replace(image, sampling=replace(s, steps=int(v))), strengths
    if axis.name == "cfg":
        return replace(image, sampling=replace(s, cfg=float(v))), strengths
    if axis.name == "sampler":
        return replace(image, sampling=replace(s, sampler=str(v))), strengths
    if axis.name == "scheduler":
        return replace(image, sampling=replace(s, scheduler=str(v))), strengths
    if axis.name == "clip-skip":
        return replace(image, clip_skip=int(v)), strengths
    if axis.name == "controlnet-strength":  # the first ControlNet's (sd-webui-controlnet's unit 0)
        first = replace(image.controlnets[0], strength=float(v))
        return replace(image, controlnets=(first, *image.controlnets[1:])), strengths
    if axis.name in IP_ADAPTER_AXES:
        prompts = (_ip_adapter(axis.name, v, image), *image.ip_adapters[1:])
        return replace(image, ip_adapters=prompts), strengths
    if axis.name == "redux-strength":  # the first Redux picture's (its strength type kept)
        picture = replace(image.redux[0], strength=float(v))
        return replace(image, redux=(picture, *image.redux[1:])), strengths
    if axis.name == "prompt-sr":
        return replace(image, prompt=image.prompt.replace(str(axis.values[0]), str(v))), strengths
    assert axis.name in LORA_AXES and strengths is not None, axis.name
    m, c = strengths
    f = float(v)
    return image, (f, f) if axis.name == "lora-strength" else (f, c) if "model" in axis.name else (m, f)


def _ip_adapter(name: str, v: Value, image: ImageSettings) -> IpAdapterUse:
    """The first image prompt with the axis' weight or weight type (a type without a composition
    picture or a boost drops them)."""
    first = image.ip_adapters[0]
    if name == "ip-adapter-weight":
        return replace(first, weight=float(v))
    if name == "ip-adapter-scaling":
        return replace(first, scaling=str(v))
    t = str(v)
    composing = t in COMPOSITION_TYPES
    return replace(
        first, weight_type=t, composition=first.composition if composing else None,
        composition_weight=first.composition_weight if composing else None,
        boost=first.boost if t in PRECISE_TYPES else None,
    )  # fmt: skip


def _apply(
    axis: Axis, i: int, request: GenerateRequest, strengths: Strengths | None
) -> tuple[GenerateRequest, Strengths | None]:
    if axis.name == "checkpoint":
        models = replace(request.models, checkpoint=Path(str(axis.values[i])))
        return replace(request, models=models), strengths
    image, strengths = _apply_image(axis, i, request.image, strengths)
    if axis.name in request.family_defaults:  # the axis sets it: no longer the family's to give
        kept = tuple(n for n in request.family_defaults if n != axis.name)
        return replace(request, image=image, family_defaults=kept), strengths
    return replace(request, image=image), strengths


def _check(axes: Sequence[Axis], image: ImageSettings, has_lora: bool) -> None:
    prompt = image.prompt
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise _bad("the same axis is given twice", "Give each axis once across the x, y and z axes")
    for a in axes:
        if a.name in LORA_AXES and not has_lora:
            raise _bad(f"a {a.name} axis needs a LoRA", "Add a LoRA file to the stack")
        if a.name == "controlnet-strength" and not image.controlnets:
            raise _bad(
                "a controlnet-strength axis needs a ControlNet", "Add a ControlNet and its hint picture"
            )
        if a.name in IP_ADAPTER_AXES and not image.ip_adapters:
            raise _bad(f"a {a.name} axis needs an IP-Adapter", "Add an IP-Adapter and its picture")
        if a.name == "redux-strength":
            _check_redux(a, image)
        if a.name == "prompt-sr" and str(a.values[0]) not in prompt:
            raise _bad(
                f"the prompt does not contain {a.values[0]!r}",
                "Prompt S/R searches the prompt for its first value: use words the prompt has",
            )


def _check_redux(axis: Axis, image: ImageSettings) -> None:
    if not image.redux:
        raise _bad(
            "a redux-strength axis needs a FLUX Redux picture", "Add a Redux style model and its picture"
        )
    if image.redux[0].strength_type == "attn_bias" and any(float(v) <= 0 for v in axis.values):
        raise _bad(
            "a redux-strength axis gives strength 0 to a Redux picture whose strength type is attn_bias",
            "Give strengths above 0 (attn_bias adds log(strength) to the attention), or use multiply",
        )


Place = tuple[tuple[int, int, int], tuple[tuple[int, Axis, int], ...]]


def _places(x: Axis, y: Axis | None, z: Axis | None) -> list[Place]:
    """Every cell's (x, y, z) and its (slot, axis, value index) triples, Z then Y then X."""
    sizes = [len(a.values) if a is not None else 1 for a in (x, y, z)]
    out: list[Place] = []
    for iz in range(sizes[2]):
        for iy in range(sizes[1]):
            for ix in range(sizes[0]):
                at = ((0, x, ix), (1, y, iy), (2, z, iz))
                out.append(((ix, iy, iz), tuple((k, a, i) for k, a, i in at if a is not None)))
    return out


def cells(base: GenerateRequest, x: Axis, y: Axis | None = None, z: Axis | None = None) -> list[Cell]:
    """Every cell of the grid, ordered so that model swaps are fewest: checkpoint first, then Z, Y, X."""
    axes = [a for a in (x, y, z) if a is not None]
    _check(axes, base.image, bool(base.loras))
    if any(a.name == "checkpoint" for a in axes) and base.models.diffusion_model is not None:
        raise _bad(
            "a checkpoint axis with a separate diffusion model", "Give checkpoints, not a diffusion model"
        )
    first = base.loras[0] if base.loras else None
    strengths0 = (first.model, first.model if first.clip is None else first.clip) if first else None
    name = first.path.stem if first is not None else ""
    live_axes = any(a.name in LORA_AXES for a in axes)
    out: list[Cell] = []
    for (ix, iy, iz), place in _places(x, y, z):
        request, strengths = base, strengths0
        labels = ["", "", ""]
        for k, axis, i in place:
            request, strengths = _apply(axis, i, request, strengths)
            labels[k] = axis.label(i, name)
        live = strengths if live_axes else None
        out.append(Cell(ix, iy, iz, request, live, (labels[0], labels[1], labels[2])))
    order = {p: i for i, p in enumerate(dict.fromkeys(c.request.models.checkpoint for c in out))}
    return sorted(out, key=lambda c: (order[c.request.models.checkpoint], c.z, c.y, c.x))


def image_cells(
    image: ImageSettings,
    strengths: Strengths | None,
    x: Axis,
    y: Axis | None = None,
    z: Axis | None = None,
    *,
    lora: str = "",
) -> list[ImageCell]:
    """Every cell of a grid on the models at hand, Z then Y then X: ``strengths`` are the swept
    LoRA's as they are (None: no LoRA), ``lora`` its name for the labels. A checkpoint axis
    changes the models, so it is refused here (it runs through the queue)."""
    axes = [a for a in (x, y, z) if a is not None]
    if any(a.name == "checkpoint" for a in axes):
        raise _bad("a checkpoint axis changes the models", "Queue the grid to compare checkpoints")
    _check(axes, image, strengths is not None)
    live_axes = any(a.name in LORA_AXES for a in axes)
    out: list[ImageCell] = []
    for (ix, iy, iz), place in _places(x, y, z):
        cell_image, cell_strengths = image, strengths
        labels: list[str] = ["", "", ""]
        values: list[Value | None] = [None, None, None]
        for k, axis, i in place:
            cell_image, cell_strengths = _apply_image(axis, i, cell_image, cell_strengths)
            labels[k], values[k] = axis.label(i, lora), axis.values[i]
        live = cell_strengths if live_axes else None
        texts, at = (labels[0], labels[1], labels[2]), (values[0], values[1], values[2])
        out.append(ImageCell(ix, iy, iz, cell_image, live, texts, at))
    return out
