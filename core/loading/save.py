"""Writing a loaded bundle back to one file, in the layout it came from.

Each component's module state is converted back to its file layout (open_clip text encoders go
back to open_clip names; diffusers-named inputs are written in the original layout, which every
tool reads), put under its prefix, and the file's other tensors (scheduler buffers, position ids)
are written back unchanged. An unpatched model round-trips bit for bit. The write is atomic and
never touches the input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch

from core.errors import LoadoutError
from core.files.writer import WriteProgress, refuse_same_file, write_safetensors
from core.loading.convert_file import cast_tensor
from core.loading.families import modelspec_architecture
from core.loading.loader import ModelBundle
from core.quant.fp8_weight import ScaledFp8Weight
from core.quant.tensor import DeferredWeight, QuantizedWeight, logical_shape


def checkpoint_tensors(bundle: ModelBundle) -> dict[str, torch.Tensor]:
    """Every tensor of the file to write, by full key."""
    out: dict[str, torch.Tensor] = {}
    for comp in bundle.components:
        state = comp.module.state_dict()
        in_file = comp.plan.architecture.convert_out(state, comp.layout, comp.family)
        for key, tensor in in_file.items():
            out[comp.prefix + key] = tensor
    for key, get in bundle.extras.items():
        out.setdefault(key, get())
    return out


def modelspec(bundle: ModelBundle, title: str | None = None) -> dict[str, str]:
    meta = {"modelspec.sai_model_spec": "1.0.0"}
    family = bundle.detection.family
    architecture = modelspec_architecture(family)
    if architecture is not None:
        meta["modelspec.architecture"] = architecture
    meta["modelspec.title"] = title or bundle.metadata.get("modelspec.title") or bundle.path.stem
    meta["modelspec.implementation"] = "loadout"
    return meta


class _Cast(Mapping[str, torch.Tensor]):
    def __init__(self, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        self._t, self._dtype = tensors, dtype

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._t[key]
        if isinstance(t, DeferredWeight):  # dequantized (with any LoRA on it), never requantized
            t = t.materialize(torch.float32)
        return cast_tensor(t, self._dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)


class _Fp8Patched(Mapping[str, torch.Tensor]):
    """Plain fp8 weights carrying a LoRA, written in their own fp8 dtype (the file asked for)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._t = tensors

    def __getitem__(self, key: str) -> torch.Tensor:
        t = self._t[key]
        if isinstance(t, ScaledFp8Weight):
            return cast_tensor(t.materialize(torch.float32), t.dtype)
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)


def save_checkpoint(
    bundle: ModelBundle,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, str] | None = None,
    dtype: torch.dtype | None = None,
    also_not: Sequence[Path] = (),
    progress: Callable[[WriteProgress], None] | None = None,
    check: Callable[[], None] | None = None,
) -> Path:
    """Write ``bundle`` to ``path`` (safetensors). The source's metadata is kept, ModelSpec
    fields are added, and ``metadata`` (e.g. a record of merged LoRAs) goes on top. ``dtype``
    converts floating-point tensors as they are written; ``also_not``: other inputs the output
    must not overwrite (the LoRA files of a merge)."""
    out = Path(path)
    refuse_same_file(out, bundle.path, *also_not)
    meta = dict(bundle.metadata)
    meta.update(modelspec(bundle))
    if metadata:
        meta.update(metadata)
    meta["loadout.source"] = json.dumps({"file": bundle.path.name, "family": bundle.detection.family})
    tensors: Mapping[str, torch.Tensor] = checkpoint_tensors(bundle)
    quantized = [k for k, v in tensors.items() if isinstance(v, QuantizedWeight)]
    scaled = [k for k, v in tensors.items() if isinstance(v, ScaledFp8Weight) and v.scale is not None]
    if (quantized or scaled) and dtype is None:
        what = "quantized (GGUF)" if quantized else "scaled fp8"
        first = (quantized or scaled)[0]
        detail = "are GGML blocks" if quantized else "are fp8 values with a scale beside them"
        raise LoadoutError(
            f"cannot write {out.name}: {bundle.path.name} holds {what} weights",
            why=f"{len(quantized) + len(scaled)} weights such as {first} {detail}; Loadout never "
            "requantizes, and baking a change into them would need it",
            fix="Choose an output dtype (fp16, bf16 or fp32) to write a dequantized copy",
            code="quantized_source",
        )
    if dtype is None and any(isinstance(v, ScaledFp8Weight) for v in tensors.values()):
        tensors = _Fp8Patched(tensors)
    specs = None
    if dtype is not None:
        specs = {
            k: (
                cast_tensor(
                    torch.empty(
                        0, dtype=torch.float32 if isinstance(v, QuantizedWeight) else v.dtype, device="meta"
                    ),
                    dtype,
                ).dtype,
                logical_shape(v),
            )
            for k, v in tensors.items()
        }
        tensors = _Cast(tensors, dtype)
    return write_safetensors(out, tensors, meta, progress=progress, check=check, specs=specs)
