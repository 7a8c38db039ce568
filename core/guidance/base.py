"""What every guidance patch is: a small frozen record of its parameters that, given what it needs
to know of the model (:class:`GuidanceContext`), gives the sampler's :class:`ModelPatches`.

A record's parameters are its dataclass fields; each carries its allowed values in its metadata
(:func:`number`, :func:`choice`, :func:`layers`), so the records are checked, read from text,
written back and offered in the window from one description.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from typing import Any, ClassVar, Protocol

from torch import Tensor

from core.errors import LoadoutError
from core.models.patches import PatchPoints
from core.sampling.model_sampling import ModelSampling
from core.sampling.patches import ModelPatches
from core.values import NumberRange

#: ``(samples, width, height, method) -> samples`` (ComfyUI's ``common_upscale``, crop disabled)
Resize = Callable[[Tensor, int, int, str], Tensor]

#: ComfyUI's upscale methods, as PatchModelAddDownscale offers them (its first is its default)
RESIZE_METHODS = ("bicubic", "nearest-exact", "bilinear", "area", "bislerp")


@dataclass(frozen=True)
class GuidanceContext:
    """What a patch needs of the model it patches: the network's patch points, its model
    sampling (start/end percents to sigmas), the UNet's model channels (None for other networks)
    and the latent resize of the engine."""

    points: PatchPoints
    sampling: ModelSampling
    model_channels: int | None
    resize: Resize


class GuidancePatch(Protocol):
    #: the name the patch is asked for by ("pag", "freeu_v2" ...)
    name: ClassVar[str]
    #: what it is, in a few words (the window's list, the docs)
    title: ClassVar[str]

    def model_patches(self, context: GuidanceContext) -> ModelPatches: ...


@dataclass(frozen=True)
class Choice:
    name: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class Layers:
    """A list of block numbers (Skip Layer Guidance's layers)."""

    name: str
    most: int = 99


Limits = NumberRange | Choice | Layers


def number(default: float, lo: float, hi: float, name: str, *, integer: bool = False) -> Any:
    """A number field of a record with its allowed range."""
    return field(default=default, metadata={"limits": NumberRange(name, lo, hi, integer=integer)})


def choice(default: str, options: tuple[str, ...], name: str) -> Any:
    return field(default=default, metadata={"limits": Choice(name, options)})


def layers(default: tuple[int, ...], name: str) -> Any:
    return field(default=default, metadata={"limits": Layers(name)})


def flag(default: bool, name: str) -> Any:
    return field(default=default, metadata={"limits": Choice(name, ("true", "false"))})


def parameters(record: object) -> tuple[Field[Any], ...]:
    """The record's parameters, in order."""
    return tuple(f for f in fields(record) if "limits" in f.metadata)  # type: ignore[arg-type]


def limits_of(f: Field[Any]) -> Limits:
    found: Limits = f.metadata["limits"]
    return found


def check_record(record: object) -> None:
    """Every parameter of ``record`` in its range, or one error naming each that is not."""
    problems = []
    for f in parameters(record):
        value, limits = getattr(record, f.name), limits_of(f)
        if isinstance(limits, NumberRange):
            if (why := limits.problem(value)) is not None:
                problems.append(f"{why}: {limits.name} must be {limits.describe()}")
        elif isinstance(limits, Layers):
            if not all(isinstance(n, int) and 0 <= n <= limits.most for n in value):
                problems.append(f"{limits.name} must be block numbers from 0 to {limits.most}")
        elif isinstance(value, str) and value not in limits.options:
            problems.append(f"{limits.name} {value!r} is not one of {', '.join(limits.options)}")
    if problems:
        name = getattr(record, "name", type(record).__name__)
        raise LoadoutError(
            f"the guidance patch {name} cannot be used with these values",
            why="; ".join(problems),
            fix="Change the values named above",
            code="bad_argument",
        )


#: what to do when a UNet patch meets another network
LEAVE = "Leave the patch out for this model (it is made for the SD1, SD2 and SDXL UNets)"


def refuse(feature: str, why: str) -> LoadoutError:
    """A patch that does not fit the loaded model, in words."""
    return LoadoutError(
        f"{feature} does not fit this diffusion model",
        why=why,
        fix=f"Leave {feature} out for this model",
        code="unsupported_family",
    )
