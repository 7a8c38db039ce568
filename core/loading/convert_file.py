"""``loadout convert``: change a file's dtype and/or turn a pickle checkpoint into safetensors.

Tensors stream from the source one at a time (memory-mapped for safetensors), so converting a
7 GB checkpoint never holds it twice. Only floating-point tensors change dtype. For fp8, only
matrices and convolution kernels are converted (as fp8 checkpoints are saved): vectors (biases,
norms) keep their dtype, and values are clamped to the fp8 range instead of becoming NaN.
The write is atomic and the input is never modified.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch

from core.errors import LoadoutError
from core.files.destination import check_output_file
from core.files.dtypes import DTYPES as DTYPE_INFO
from core.files.dtypes import torch_dtype_by_short
from core.files.model_file import TensorIndex, read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict
from core.files.safetensors import SafetensorsFile
from core.files.writer import WriteProgress, refuse_same_file, write_safetensors
from core.quant.gguf_types import PLAIN_DTYPES
from core.quant.scaled_fp8 import fold, scaled_reader
from core.quant.tensor import DeferredWeight

#: the dtypes a file can be converted (and a run computed) in, by short name (core.files.dtypes)
DTYPES: Mapping[str, torch.dtype] = {
    name: dtype
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3fn")
    if (dtype := torch_dtype_by_short(name)) is not None
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise LoadoutError(
            f"unknown dtype {name!r}", fix="Use one of: " + ", ".join(DTYPES), code="bad_argument"
        ) from None


def cast_tensor(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    if dtype is None or not t.is_floating_point() or t.dtype == dtype:
        return t
    if dtype.itemsize == 1:  # fp8: weights only, clamped to the representable range
        if t.ndim < 2:
            return t
        limit = torch.finfo(dtype).max
        return t.to(torch.float32).clamp_(-limit, limit).to(dtype)
    return t.to(dtype)


class _Converted(Mapping[str, torch.Tensor]):
    """The source's tensors, cast on access (one at a time while the writer streams them)."""

    def __init__(
        self, keys: list[str], get: Callable[[str], torch.Tensor], dtype: torch.dtype | None
    ) -> None:
        self._keys, self._get, self._dtype = keys, get, dtype

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._get(key)
        if isinstance(t, DeferredWeight):  # GGUF blocks, scaled fp8: their values, then the dtype
            t = t.materialize(torch.float32)
        return cast_tensor(t, self._dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def layout_is_scaled(index: TensorIndex, name: str) -> bool:
    layout = index.extra.get("scaled_fp8")
    return layout is not None and name in layout.layers


def convert_file(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    dtype: torch.dtype | None = None,
    *,
    progress: Callable[[WriteProgress], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Path:
    check_output_file(out)  # as given: "newdir/" names a folder (a Path would drop the slash)
    source, target = Path(src), Path(out)
    refuse_same_file(target, source)

    index, get = _reader(source, read_tensor_index(source), dtype)
    specs = _specs(source, index, dtype)
    meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    meta["loadout.converted"] = json.dumps(
        {
            "from": source.name,
            "format": index.format,
            "dtype": str(dtype).removeprefix("torch.") if dtype else None,
        }
    )
    return write_safetensors(
        target, _Converted(list(index.tensors), get, dtype), meta, progress=progress, check=check, specs=specs
    )


def _reader(
    source: Path, index: TensorIndex, dtype: torch.dtype | None
) -> tuple[TensorIndex, Callable[[str], torch.Tensor]]:
    """How each tensor of ``source`` is read for the copy (scaled fp8 folded to its values when
    the output dtype is wider), and the index that copy writes; refuses what cannot be converted."""
    if index.format == "safetensors":
        shards: dict[str, Path] | None = index.extra.get("shards")
        if shards is None:
            # plain file reads, not the mapping: a file truncated meanwhile is an error, not a SIGBUS
            get: Callable[[str], torch.Tensor] = SafetensorsFile(source).read_tensor
        else:  # a split model (core.files.shards) is written as one file
            files = {p: SafetensorsFile(p) for p in index.extra["shard_files"]}
            get = lambda key: files[shards[key]].read_tensor(key)  # noqa: E731
        if dtype is not None and dtype.itemsize > 1:  # scaled fp8: write the values, drop the scales
            index = fold(index)
            layout = index.extra.get("scaled_fp8")
            if layout is not None:
                get = scaled_reader(get, layout, source.name)
    elif index.format == "pickle":
        tensors = load_pickle_state_dict(source)
        get = tensors.__getitem__
    elif index.format == "gguf":
        if dtype is None or dtype.itemsize == 1:
            raise LoadoutError(
                f"{source.name} is a quantized GGUF file: converting it needs an output dtype",
                why="safetensors cannot hold GGML blocks, and Loadout never requantizes",
                fix="Choose an output dtype (fp16, bf16 or fp32) to write a dequantized copy",
                code="bad_argument",
            )
        from core.files.gguf_data import GGUFTensors
        from core.loading.loader import _refuse_unloadable_format

        _refuse_unloadable_format(index)
        gguf = GGUFTensors(source)
        names: dict[str, str] = index.extra.get("gguf_names", {})  # a T5: written under its own names
        get = lambda key: gguf.tensor(names.get(key, key))  # noqa: E731
    else:
        raise LoadoutError(
            f"{source.name} is a {index.format.upper()} file, which cannot be converted",
            fix="Use a .safetensors, .ckpt or .gguf version of the model",
            code="unsupported_format",
        )
    return index, get


def _specs(
    source: Path, index: TensorIndex, dtype: torch.dtype | None
) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Each output tensor's dtype and shape, known before any is read (the writer's header)."""
    specs: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    for name, info in index.tensors.items():
        dt = DTYPE_INFO.get(info.dtype)
        stored = dt.torch_dtype if dt is not None else PLAIN_DTYPES.get(info.dtype)
        if index.format == "gguf" and stored is None:
            stored = torch.float32  # dequantized in float32, then cast
        elif layout_is_scaled(index, name):
            stored = torch.float32
        if stored is None:
            raise LoadoutError(
                f"{source.name}: tensor {name!r} is stored as {info.dtype}, which torch cannot read",
                fix="Update torch",
                code="unsupported_dtype",
            )
        probe = torch.empty(info.shape if len(info.shape) else (), dtype=stored, device="meta")
        specs[name] = (cast_tensor(probe, dtype).dtype, info.shape)
    return specs
