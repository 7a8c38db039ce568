"""Pickle checkpoints (.ckpt .pt .pth .bin), read without ever running code from them.

Two readers:

* :func:`read_pickle_index` reads *only* the pickle stream (``data.pkl`` inside a torch zip) with
  the restricted unpickler of :mod:`core.files.unpickler`, whose tensor constructors return
  :class:`TensorInfo` records. No tensor data is read and no callable from the file is invoked.
* :func:`load_pickle_state_dict` loads tensors with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.errors import FileFormatError, UnsafeFileError
from core.files.leases import open_input, read_input
from core.files.tensor_info import TensorInfo
from core.files.unpickler import IndexUnpickler, TensorStub, starts_with_legacy_magic

#: A data.pkl bigger than this is not a model checkpoint's index.
PICKLE_INDEX_CAP = 256 * 1024 * 1024

PICKLE_WARNING = (
    "pickle format: this file type can carry code. Loadout reads it without running anything, "
    "but convert it to .safetensors to be safe elsewhere (loadout convert)"
)


@dataclass
class PickleIndex:
    tensors: dict[str, TensorInfo]
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_STATE_DICT_KEYS = (
    "state_dict",
    "model",
    "module",
    "model_state_dict",
    "params_ema",
    "params",
    "ema",
    "string_to_param",
)


def _flatten(obj: Any, prefix: str, out: dict[str, TensorInfo], depth: int = 0) -> None:
    if depth > 4:
        return
    if isinstance(obj, TensorStub):
        out[prefix.rstrip(".")] = obj.info
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            _flatten(v, f"{prefix}{k}.", out, depth + 1)


def find_state_dict(top: Any) -> tuple[Any, str]:
    """The mapping that holds the weights, and the wrapper key it was found under ("" if none)."""
    if isinstance(top, Mapping):
        for key in _STATE_DICT_KEYS:
            inner = top.get(key)
            if (
                isinstance(inner, Mapping)
                and inner
                and any(isinstance(v, (TensorStub, torch.Tensor, Mapping)) for v in inner.values())
            ):
                if key == "string_to_param":  # A1111 textual inversion: keep the whole file
                    return top, ""
                return inner, key
    return top, ""


def _scalar_extras(top: Any) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if isinstance(top, Mapping):
        for key in ("global_step", "epoch", "name", "step"):
            value = top.get(key)
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                extras[key] = value
    return extras


def read_pickle_index(path: str | os.PathLike[str]) -> PickleIndex:
    """Names, dtypes and shapes of the tensors in a pickle checkpoint, without reading them."""
    p = Path(path)
    with open_input(p) as fh:
        magic = fh.read(4)
    if magic.startswith(b"PK"):
        return _read_zip_index(p)
    return _read_plain_index(p)


def _read_zip_index(p: Path) -> PickleIndex:
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FileFormatError(
            f"{p.name} is a damaged PyTorch archive",
            why=f"the zip directory cannot be read ({exc})",
            fix="The download was probably cut off; get the file again",
            code="truncated",
        ) from None
    with zf:
        names = zf.namelist()
        pkl = [n for n in names if n.endswith("data.pkl")]
        if not pkl:
            raise FileFormatError(
                f"{p.name} is a zip file but not a PyTorch checkpoint",
                why="it has no data.pkl",
                fix="Pick a model file",
                code="not_a_model",
            )
        entry = min(pkl, key=len)
        root = entry[: -len("data.pkl")]
        storages = {n[len(root) + 5 :] for n in names if n.startswith(root + "data/")}
        info = zf.getinfo(entry)
        if info.file_size > PICKLE_INDEX_CAP:
            raise FileFormatError(
                f"{p.name} has a {info.file_size:,}-byte pickle index",
                why="that is far larger than any checkpoint's",
                code="header_too_large",
            )
        try:
            data = zf.read(entry)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise FileFormatError(
                f"{p.name} is a damaged PyTorch archive",
                why=str(exc),
                fix="Get the file again",
                code="truncated",
            ) from None
    return _unpickle_index(p, data, storages)


def _read_plain_index(p: Path) -> PickleIndex:
    size = p.stat().st_size
    if size > PICKLE_INDEX_CAP:
        # A legacy (pre-1.6) torch file keeps data after the pickles: let torch read it safely.
        return _legacy_index(p)
    data = read_input(p)
    if starts_with_legacy_magic(data):
        return _legacy_index(p)
    return _unpickle_index(p, data, None)


def _unpickle_index(p: Path, data: bytes, storages: set[str] | None) -> PickleIndex:
    unpickler = IndexUnpickler(io.BytesIO(data), storages, p)
    try:
        top = unpickler.load()
    except (UnsafeFileError, FileFormatError):
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        RecursionError,
        MemoryError,
        OverflowError,  # a FRAME or length opcode claiming more bytes than can exist
        struct.error,
    ) as exc:
        raise FileFormatError(
            f"{p.name} is not a readable pickle checkpoint",
            why=f"{type(exc).__name__}: {exc}"[:300],
            fix="Get the file again, or a .safetensors version",
            code="invalid_pickle",
        ) from None
    sd, wrapper = find_state_dict(top)
    tensors: dict[str, TensorInfo] = {}
    _flatten(sd, "", tensors)
    out = PickleIndex(tensors, _scalar_extras(top), [PICKLE_WARNING])
    if wrapper:
        out.extra["wrapper"] = wrapper
    if unpickler.placeholders:
        shown = ", ".join(sorted(unpickler.placeholders)[:3])
        out.warnings.append(
            f"the file calls code outside its weights ({shown}): an ordinary pickle load would import "
            "and run it; Loadout neither imported nor ran it"
        )
    return out


def _legacy_index(p: Path) -> PickleIndex:
    sd = load_pickle_state_dict(p)
    tensors = {
        k: TensorInfo(_torch_dtype_name(v.dtype), tuple(v.shape), v.numel() * v.element_size())
        for k, v in sd.items()
    }
    return PickleIndex(tensors, {}, [PICKLE_WARNING, "legacy PyTorch format: read in full to inspect"])


def _torch_dtype_name(dtype: torch.dtype) -> str:
    from core.files.dtypes import name_of_torch_dtype

    return name_of_torch_dtype(dtype)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GLOBAL = re.compile(r"(?:GLOBAL|global)\s+([A-Za-z_][\w.]*)")


def _refused_global(text: str) -> str | None:
    """The ``module.name`` torch's restricted unpickler refused, if its message names one."""
    m = _GLOBAL.search(_ANSI.sub("", text))
    return m.group(1) if m else None


def _plain_reason(text: str) -> str:
    """torch's reason in one plain line: no terminal colours, no advice to turn its safety off."""
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    kept = [ln for ln in lines if "weights_only" not in ln]
    return (kept[0] if kept else "torch could not read it")[:200]


def load_pickle_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Tensors of a pickle checkpoint via ``torch.load(weights_only=True)``; nothing else runs."""
    p = Path(path)
    # Check first with the restricted reader: it explains refusals better than torch does.
    with open_input(p) as fh:
        zipped = fh.read(2) == b"PK"
    if zipped:
        _read_zip_index(p)
    elif p.stat().st_size <= PICKLE_INDEX_CAP:
        data = read_input(p)
        if not starts_with_legacy_magic(data):
            _unpickle_index(p, data, None)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*pickle protocol.*", category=UserWarning)
            top = torch.load(p, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as exc:
        name = _refused_global(str(exc))
        raise UnsafeFileError(
            f"{p.name} was refused: it holds objects other than tensors",
            why=(f"it refers to {name}, which Loadout never imports from a model file" if name else
                 "loading it would run Python code stored in the file"),
            fix="Get a .safetensors version of the model from a source you trust",
            code="unsafe_pickle",
        ) from None  # fmt: skip
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise FileFormatError(
            f"{p.name} is not a readable PyTorch checkpoint",
            why=_plain_reason(str(exc)),
            fix="Get the file again",
            code="invalid_pickle",
        ) from None
    sd, _ = find_state_dict(top)
    out: dict[str, torch.Tensor] = {}

    def walk(obj: Any, prefix: str, depth: int) -> None:
        if isinstance(obj, torch.Tensor):
            out[prefix.rstrip(".")] = obj
        elif isinstance(obj, Mapping) and depth < 5:
            for k, v in obj.items():
                walk(v, f"{prefix}{k}.", depth + 1)

    walk(sd, "", 0)
    return out
