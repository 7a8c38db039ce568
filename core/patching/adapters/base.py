"""The adapter contract and the registry of adapter classes.

An adapter holds the factor tensors of one module of an adapter file (LoRA, LoHa, ...) and turns a
weight into the patched weight. Every computation is a pure function of tensors: the input weight is
never mutated; the work happens in an intermediate dtype (float32 unless told) and the result is cast
back to the weight's dtype.

Strength semantics, shared by every class: ``W(s) = W + D(W, s)`` with ``D(W, 0) == 0``, so strength 0
is a no-op and negative strengths (slider LoRAs) extrapolate. For all algorithms except BOFT,
``D(W, s) = s * D(W, 1)`` (``linear_in_strength``); additive adapters (``is_additive``) further have
``D(W, 1) = delta`` independent of ``W``, so a caller can cache ``delta`` and re-apply on a strength
change with one multiply-add.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal, Self, TypeVar, overload

import torch
from torch import Tensor

from core.patching.adapters.dora import dora_difference, resolve_axis
from core.patching.adapters.errors import bad_factors, check_finite, check_finite_scalar, shape_mismatch

#: "out": one DoRA magnitude per output channel; "in": one per input channel (see ``dora.py``).
DoraAxis = Literal["out", "in"]


def fits(product: Sequence[int], weight: Sequence[int]) -> bool:
    """A product fits a weight when the output dim agrees and a reshape maps one onto the other.

    The reshape lets a linear LoRA patch a 1x1 conv (SD1 ``proj_in``) and a flat conv LoHa patch a
    4-D kernel, as every loader does.
    """
    return (
        len(product) > 0
        and len(weight) > 0
        and product[0] == weight[0]
        and math.prod(product) == math.prod(weight)
    )


def flat(tensor: Tensor) -> Tensor:
    """A factor as a matrix: the first dim kept, the rest flattened (``[r, in, kh, kw] -> [r, in*kh*kw]``)."""
    return tensor.reshape(tensor.shape[0], -1)


@dataclass(frozen=True, eq=False)
class Adapter(ABC):
    """One module's adapter: its factor tensors plus scalars, and the weight math as pure methods.

    Subclasses are frozen dataclasses that validate their factors when built (NaN/Inf, consistency
    between factors) and compute in ``difference``.
    """

    #: Algorithm id ("lora", "locon", "loha", "lokr", "glora", "oft", "boft", "diff", "set").
    name: ClassVar[str]
    #: Canonical part names that identify this algorithm in a module's factors.
    markers: ClassVar[frozenset[str]]
    #: Every canonical part this class reads (alpha and dora_scale are passed separately).
    parts: ClassVar[frozenset[str]]

    module: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        check_finite(self.module, self.tensors())
        self.validate()

    # -- what subclasses provide -------------------------------------------------------------

    @classmethod
    def claims(cls, factors: Mapping[str, Tensor]) -> bool:
        """Whether a module with these canonical parts is of this algorithm."""
        return bool(cls.markers & factors.keys())

    @classmethod
    @abstractmethod
    def from_parts(
        cls,
        factors: Mapping[str, Tensor],
        *,
        alpha: float | None,
        dora_scale: Tensor | None,
        dora_axis: DoraAxis | None,
        module: str,
    ) -> Self:
        """Build from canonical parts; ``AdapterFormatError`` when a required part is missing."""

    @abstractmethod
    def tensors(self) -> dict[str, Tensor | None]:
        """The factor tensors by canonical part name (None for absent optional parts)."""

    def validate(self) -> None:  # noqa: B027 - an optional hook
        """Check the factors agree with each other; raise ``AdapterFormatError`` when not."""

    @abstractmethod
    def target_shape(self) -> tuple[int, ...]:
        """The shape of the adapter's product as its factors give it (``check`` says what fits)."""

    @abstractmethod
    def difference(self, weight: Tensor, strength: float) -> Tensor:
        """``W(s) - W`` for a ``weight`` already in the intermediate dtype; same dtype and device out.

        Callers go through ``apply``, which checks shapes first; ``weight`` is never mutated.
        """

    # -- shared behaviour -------------------------------------------------------------------

    @property
    def linear_in_strength(self) -> bool:
        """True when ``difference(W, s) == s * difference(W, 1)``: cache it, rescale on a change."""
        return True

    @property
    def is_additive(self) -> bool:
        """True when the patch is ``W + s * delta`` with ``delta`` independent of ``W``."""
        return False

    def delta(self, weight_shape: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The weight-independent change at strength 1 (LoRA, LoHa, LoKr, diff); see ``is_additive``.

        Adapters whose change depends on the weight (OFT, BOFT, GLoRA, set) raise ``TypeError``.
        """
        raise TypeError(f"A {self.name} adapter has no weight-independent delta; use difference() or apply()")

    def check(self, weight_shape: Sequence[int]) -> None:
        """Raise ``ModelMismatchError`` (code ``shape_mismatch``) when the adapter cannot patch it."""
        product = self.target_shape()
        if not fits(product, weight_shape):
            raise shape_mismatch(self.module, product, weight_shape)

    def on_device(self, device: torch.device) -> Self:
        """The same adapter with its factor tensors copied to ``device`` (dtypes kept; scalars,
        module and checks as they are; the factors were validated when this one was built).
        The mover places a model's factors with its weights this way, so that patching a weight
        on the device at forward copies nothing from the host."""
        twin = copy.copy(self)
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor) and value.device != device:
                object.__setattr__(twin, f.name, value.to(device, non_blocking=True))
        return twin

    def factor_bytes(self) -> int:
        """Bytes of the factor tensors (what :meth:`on_device` puts on a device)."""
        return sum(v.nbytes for f in fields(self) if isinstance(v := getattr(self, f.name), Tensor))

    def apply(
        self, weight: Tensor, strength: float, *, intermediate_dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The patched weight: a new tensor with the dtype, device and shape of ``weight``."""
        self.check(weight.shape)
        if strength == 0:
            return weight.clone()
        work = weight.to(intermediate_dtype)
        return (work + self.difference(work, float(strength))).to(weight.dtype)


@overload
def move(tensor: Tensor, dtype: torch.dtype, device: torch.device) -> Tensor: ...
@overload
def move(tensor: None, dtype: torch.dtype, device: torch.device) -> None: ...
def move(tensor: Tensor | None, dtype: torch.dtype, device: torch.device) -> Tensor | None:
    """A factor in the working dtype on the working device (None stays None)."""
    return None if tensor is None else tensor.to(device=device, dtype=dtype)


def require(factors: Mapping[str, Tensor], names: Sequence[str], module: str, algorithm: str) -> None:
    missing = [n for n in names if n not in factors]
    if missing:
        raise bad_factors(module, f"a {algorithm} module needs {', '.join(missing)}, which the file lacks")


def refuse_dora(dora_scale: Tensor | None, module: str, algorithm: str) -> None:
    if dora_scale is not None:
        raise bad_factors(module, f"it has a dora_scale, which {algorithm} does not support")


@dataclass(frozen=True, eq=False)
class LowRankAdapter(Adapter):
    """Adapters whose patch is a product of factors (LoRA, LoHa, LoKr), optionally DoRA.

    ``alpha`` scales the product by ``alpha / rank``; ``dora_scale`` makes it the DoRA variant
    (see ``dora.py``), normalised along ``dora_axis`` ("out", "in", or None to infer it).
    """

    alpha: float | None = field(default=None, kw_only=True)
    dora_scale: Tensor | None = field(default=None, kw_only=True)
    dora_axis: DoraAxis | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_finite_scalar(self.module, "alpha", self.alpha)
        check_finite(self.module, {"dora_scale": self.dora_scale})
        if self.dora_axis not in (None, "out", "in"):
            raise ValueError(f"dora_axis must be 'out', 'in' or None, not {self.dora_axis!r}")
        super().__post_init__()

    @abstractmethod
    def product(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The unscaled product of the factors, with shape ``target_shape()``."""

    @property
    @abstractmethod
    def rank(self) -> int | None:
        """The rank ``alpha`` is divided by; None when ``alpha`` does not apply (full LoKr)."""

    @property
    def scale(self) -> float:
        """``alpha / rank``, 1 without alpha. Alpha 0 scales by 0, as in ComfyUI and A1111."""
        rank = self.rank
        if self.alpha is None or rank is None:
            return 1.0
        return self.alpha / rank

    @property
    def is_additive(self) -> bool:
        return self.dora_scale is None

    def check(self, weight_shape: Sequence[int]) -> None:
        super().check(weight_shape)
        if self.dora_scale is not None:
            resolve_axis(self.dora_scale, weight_shape, self.dora_axis, self.module)

    def delta(self, weight_shape: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``scale * product`` reshaped to ``weight_shape``, not scaled by strength.

        For the DoRA variant this is the direction before normalising, not the final change.
        """
        self.check(weight_shape)
        return (self.product(dtype, device) * self.scale).reshape(tuple(weight_shape))

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        delta = self.delta(weight.shape, dtype=weight.dtype, device=weight.device)
        if self.dora_scale is None:
            return delta * strength
        return dora_difference(
            weight, delta, self.dora_scale, strength, axis=self.dora_axis, module=self.module
        )


AdapterClass = TypeVar("AdapterClass", bound=type[Adapter])


class AdapterRegistry:
    """Adapter classes by algorithm id, in registration order; a name registered twice is an error."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Adapter]] = {}

    def register(self, cls: AdapterClass) -> AdapterClass:
        name = cls.name
        if name in self._classes:
            raise ValueError(
                f"An adapter named {name!r} is already registered ({self._classes[name].__qualname__})"
            )
        self._classes[name] = cls
        return cls

    def get(self, name: str) -> type[Adapter]:
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(f"No adapter named {name!r}; known: {sorted(self._classes)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._classes)

    def __iter__(self) -> Iterator[type[Adapter]]:
        return iter(tuple(self._classes.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __len__(self) -> int:
        return len(self._classes)
