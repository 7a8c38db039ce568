"""The restricted unpicklers behind :mod:`core.files.pickle_safe`: they never run code from a file.

* :class:`IndexUnpickler` reads a checkpoint's pickle stream with tensor constructors that return
  :class:`TensorStub` records (name, dtype, shape; no data). Globals outside a short allow-list are
  refused, and a few known-harmless training leftovers (Lightning callbacks, numpy scalars) become
  inert placeholders that are never imported.
* :func:`starts_with_legacy_magic` tells a legacy (pre-1.6) torch file by its first pickle, read
  with an unpickler that refuses every global.
"""

from __future__ import annotations

import collections
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import FileFormatError, UnsafeFileError
from core.files.dtypes import DTYPES, nbytes_for
from core.files.tensor_info import TensorInfo

_STORAGE_DTYPES = {
    "DoubleStorage": "F64",
    "FloatStorage": "F32",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
    "Float8_e4m3fnStorage": "F8_E4M3",
    "Float8_e5m2Storage": "F8_E5M2",
}

#: Modules whose objects appear in training checkpoints beside the weights. They are replaced by
#: inert placeholders (never imported, never called).
_INERT_PREFIXES = (
    "pytorch_lightning.",
    "lightning.",
    "lightning_fabric.",
    "omegaconf.",
    "numpy.",
    "_codecs.",
    "typing.",
)


@dataclass(frozen=True)
class _StorageType:
    dtype: str


@dataclass
class _StorageRef:
    dtype: str
    key: str
    numel: int


class _Inert:
    """Stands in for an object of a class Loadout does not import. Accepts any state."""

    _qualname = "object"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args

    def __setstate__(self, state: Any) -> None:
        self._state = state

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __repr__(self) -> str:
        return f"<not loaded: {self._qualname}>"


@dataclass(frozen=True)
class TensorStub:
    info: TensorInfo
    storage_key: str


def _rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any, *rest: Any) -> TensorStub:
    if not isinstance(storage, _StorageRef):
        raise pickle.UnpicklingError("tensor without storage")
    shape = tuple(int(s) for s in size)
    dt = DTYPES[storage.dtype]
    numel = 1
    for s in shape:
        numel *= s
    return TensorStub(TensorInfo(storage.dtype, shape, nbytes_for(dt, numel)), storage.key)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


class IndexUnpickler(pickle.Unpickler):
    def __init__(self, stream: io.BytesIO, storages: set[str] | None, path: Path) -> None:
        super().__init__(stream)
        self._storages = storages
        self._path = path
        self.placeholders: set[str] = set()

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if full in (
            "torch._utils._rebuild_tensor_v2",
            "torch._utils._rebuild_tensor",
            "torch._utils._rebuild_tensor_v3",
        ):
            return _rebuild_tensor
        if full in ("torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"):
            return _rebuild_parameter
        if full == "collections.OrderedDict":
            return collections.OrderedDict
        if full == "torch.Size":
            return tuple
        if full in ("builtins.set", "builtins.frozenset", "builtins.slice", "builtins.complex"):
            return {"set": set, "frozenset": frozenset, "slice": slice, "complex": complex}[name]
        if full in ("torch.device", "torch.dtype") or (
            full.startswith("torch.")
            and name in ("float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool")
        ):
            return lambda *a, **k: str(a[0]) if a else name
        if module.startswith(_INERT_PREFIXES) or module in ("numpy", "_codecs"):
            self.placeholders.add(full)
            return type(name, (_Inert,), {"_qualname": full})
        raise UnsafeFileError(
            f"{self._path.name} was refused: its pickle data references {full}",
            why="loading it would run that code; a model checkpoint needs nothing of the kind, "
            "so the file is damaged or malicious",
            fix="Delete the file, or get a .safetensors version of the model from a source you trust",
            code="unsafe_pickle",
        )

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
        storage_type, key, _location, numel = pid[1], str(pid[2]), pid[3], pid[4]
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"unsupported storage type {storage_type!r}")
        if self._storages is not None and key not in self._storages:
            raise FileFormatError(
                f"{self._path.name} is incomplete: tensor storage {key} is missing",
                why="the archive was cut off or damaged",
                fix="Download the file again",
                code="truncated",
            )
        return _StorageRef(storage_type.dtype, key, int(numel))


_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Reads plain data only: any reference to a class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id refused")


def starts_with_legacy_magic(data: bytes) -> bool:
    """Legacy (pre-1.6) torch files begin with a pickled magic number, then more pickles."""
    try:
        first = _NoGlobalsUnpickler(io.BytesIO(data[:64])).load()
    except Exception:
        return False
    return isinstance(first, int) and first == _LEGACY_MAGIC
