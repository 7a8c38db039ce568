"""Requests as JSON for the queue file: frozen dataclasses of paths, numbers, strings, tuples and
torch dtypes, written field by field and read back by their type hints (no pickle: a queue file
is data, never code). New request fields of these kinds need no change here. A guidance patch
(:mod:`core.guidance`) is stored as its text, ``pag(scale=3)``."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import torch

from core.errors import LoadoutError
from core.files.dtypes import short_name, torch_dtype_by_short
from core.guidance import PATCHES, GuidancePatch, describe, read_patches

T = TypeVar("T")


def to_jsonable(value: object) -> Any:
    if type(value) in PATCHES.values():
        return describe(value)  # type: ignore[arg-type]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, torch.dtype):
        return short_name(value)
    if isinstance(value, tuple | list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in the queue file")


def _dtype(text: str) -> torch.dtype:
    dtype = torch_dtype_by_short(text) or getattr(torch, text, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {text!r}")
    return dtype


def _read(hint: Any, data: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if data is None and type(None) in args:
            return None
        return _read(next(a for a in args if a is not type(None)), data)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], v) for v in data)
        return tuple(_read(a, v) for a, v in zip(args, data, strict=True))
    if origin is dict:
        _key, val = typing.get_args(hint)
        return {k: _read(val, v) for k, v in data.items()}
    if hint is GuidancePatch:
        (patch,) = read_patches(str(data))
        return patch
    if hint is Path:
        return Path(data)
    if hint is torch.dtype:
        return _dtype(data)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_jsonable(hint, data)
    if hint is float:
        return float(data)
    return data


def from_jsonable(cls: type[T], data: dict[str, Any]) -> T:
    """The dataclass ``cls`` from :func:`to_jsonable`'s output; fields the data lacks keep their defaults."""
    try:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        kwargs = {f.name: _read(hints[f.name], data[f.name]) for f in fields if f.name in data}
        return cls(**kwargs)
    except LoadoutError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, StopIteration) as exc:
        raise LoadoutError(
            f"a queued {cls.__name__} cannot be read",
            why=str(exc),
            fix="The queue file was written by another version; remove the job and add it again",
            code="bad_queue_file",
        ) from None
