"""The tensor dtypes model files use, by their safetensors names.

One table serves every reader: safetensors names are the canonical spelling in Loadout
("F16", "BF16", "F8_E4M3", ...); pickle storages and GGUF types map onto it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DType:
    name: str  # safetensors spelling, e.g. "BF16"
    bits: int  # bits per element (4 for packed F4)
    torch_name: str | None  # attribute of the torch module, None if torch lacks it
    short: str  # what a person reads: "fp16", "bf16", "fp8_e4m3fn"
    is_float: bool

    @property
    def torch_dtype(self) -> torch.dtype | None:
        if self.torch_name is None:
            return None
        value = getattr(torch, self.torch_name, None)
        return value if isinstance(value, torch.dtype) else None


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("F64", 64, "float64", "fp64", True),
        DType("F32", 32, "float32", "fp32", True),
        DType("F16", 16, "float16", "fp16", True),
        DType("BF16", 16, "bfloat16", "bf16", True),
        DType("F8_E4M3", 8, "float8_e4m3fn", "fp8_e4m3fn", True),
        DType("F8_E5M2", 8, "float8_e5m2", "fp8_e5m2", True),
        DType("F8_E8M0", 8, "float8_e8m0fnu", "fp8_e8m0", True),
        DType("F4", 4, None, "fp4", True),
        DType("C64", 64, "complex64", "complex64", False),
        DType("I64", 64, "int64", "int64", False),
        DType("I32", 32, "int32", "int32", False),
        DType("I16", 16, "int16", "int16", False),
        DType("I8", 8, "int8", "int8", False),
        DType("U64", 64, "uint64", "uint64", False),
        DType("U32", 32, "uint32", "uint32", False),
        DType("U16", 16, "uint16", "uint16", False),
        DType("U8", 8, "uint8", "uint8", False),
        DType("BOOL", 8, "bool", "bool", False),
    )
}

_BY_TORCH: dict[torch.dtype, str] = {}
for _d in DTYPES.values():
    _t = _d.torch_dtype
    if _t is not None and _t not in _BY_TORCH:
        _BY_TORCH[_t] = _d.name


def dtype_info(name: str) -> DType | None:
    """The dtype record for a safetensors dtype name, or None when the name is unknown."""
    return DTYPES.get(name)


def name_of_torch_dtype(dtype: torch.dtype) -> str:
    """The safetensors spelling of a torch dtype ("F16" for torch.float16)."""
    try:
        return _BY_TORCH[dtype]
    except KeyError:
        raise ValueError(f"torch dtype {dtype} has no safetensors name") from None


def nbytes_for(dtype: DType, numel: int) -> int:
    """Bytes that ``numel`` elements of ``dtype`` occupy (packed sub-byte types round up)."""
    return (numel * dtype.bits + 7) // 8


_BY_SHORT: dict[str, DType] = {d.short: d for d in DTYPES.values()}


def dtype_by_short(name: str) -> DType | None:
    """The dtype record for a short name ("fp16", "bf16", "fp8_e4m3fn"), or None when unknown."""
    return _BY_SHORT.get(name)


def torch_dtype_by_short(name: str) -> torch.dtype | None:
    """The torch dtype for a short name ("bf16" -> torch.bfloat16); None when unknown or absent."""
    info = _BY_SHORT.get(name)
    return info.torch_dtype if info is not None else None


def short_name(dtype: torch.dtype) -> str:
    """The name sentences and snapshots use for a torch dtype: "fp16" for torch.float16."""
    name = _BY_TORCH.get(dtype)
    return DTYPES[name].short if name is not None else str(dtype).removeprefix("torch.")
