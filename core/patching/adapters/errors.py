"""Errors and checks shared by the adapter classes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from core.errors import FileFormatError, ModelMismatchError


class NonFiniteAdapterError(FileFormatError):
    """An adapter factor holds NaN or infinite values; applying it would destroy the weight."""

    code = "nonfinite_adapter"


class AdapterFormatError(FileFormatError):
    """The factors of one module do not make a valid adapter (missing, unknown or inconsistent)."""

    code = "invalid_adapter"


def module_label(module: str) -> str:
    return f"adapter module {module!r}" if module else "adapter module"


def shape_mismatch(
    module: str, product: Sequence[int], weight: Sequence[int], detail: str = ""
) -> ModelMismatchError:
    """The error for an adapter whose product does not fit the weight it is applied to."""
    return ModelMismatchError(
        f"The {module_label(module)} produces a patch of shape {list(product)}, "
        f"but the weight it targets has shape {list(weight)}",
        why=detail or "the adapter was trained for a different model or layer",
        fix="use an adapter made for this model family, or leave this module out",
        code="shape_mismatch",
    )


def bad_factors(module: str, why: str) -> AdapterFormatError:
    return AdapterFormatError(
        f"The {module_label(module)} has factors that do not form a valid adapter",
        why=why,
        fix="re-download or re-export the adapter file",
    )


def check_finite(module: str, tensors: Mapping[str, Tensor | None]) -> None:
    """Refuse NaN/Inf in any factor (meta tensors, which hold no data, are skipped)."""
    for part, tensor in tensors.items():
        if tensor is None or tensor.is_meta or not tensor.is_floating_point():
            continue
        if not bool(torch.isfinite(tensor).all()):
            raise NonFiniteAdapterError(
                f"The {module_label(module)} has NaN or infinite values in its {part!r} factor",
                why="the file is damaged, or the training diverged",
                fix="use another copy or version of this adapter, or leave this module out",
            )


def check_finite_scalar(module: str, part: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise NonFiniteAdapterError(
            f"The {module_label(module)} has a non-finite {part} ({value})",
            why="the file is damaged, or the training diverged",
            fix="use another copy or version of this adapter, or leave this module out",
        )
