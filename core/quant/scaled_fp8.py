"""ComfyUI's scaled fp8 files: which weights carry a scale, and reading them as ``ScaledFp8Weight``.

Two layouts exist (facts from ComfyUI's ``comfy/utils.py`` ``convert_old_quants`` and
``comfy/ops.py`` ``mixed_precision_ops``):

* **``scaled_fp8``** (the ``*_fp8_scaled`` checkpoints and text encoders of 2024-25): a marker
  tensor ``<prefix>scaled_fp8`` (its dtype is the fp8 type, float32 meaning e4m3fn; two elements
  mean "do not multiply in fp8"), and beside each scaled weight ``<layer>.scale_weight`` (float32,
  one element) and optionally ``<layer>.scale_input`` (the activation scale for fp8 matmul; 1.0
  means none).
* **``comfy_quant``** (newer mixed-precision files): ``<layer>.comfy_quant``, a uint8 tensor holding
  JSON ``{"format": "float8_e4m3fn", "full_precision_matrix_mult": true?}``, beside
  ``<layer>.weight_scale`` and optionally ``<layer>.input_scale``; or the same per-layer records in
  the file's ``_quantization_metadata`` header entry (``{"layers": {"<layer>": {...}}}``). Formats
  other than the two fp8 ones (``nvfp4``, int8 ...) are refused: Loadout cannot compute them.

A weight ``q`` with scale ``s`` stands for ``q x s``. Reading folds the scale keys away: planning,
``loadout check`` and loading see the network's own keys, and the weight key yields a
:class:`ScaledFp8Weight` (the file's fp8 view, zero-copy, with its scale).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from core.errors import FileFormatError
from core.quant.fp8_weight import ScaledFp8Weight

if TYPE_CHECKING:  # annotations only: quant sits below files (files builds quantized weights)
    from core.files.model_file import TensorIndex
    from core.files.tensor_info import TensorInfo

MARKER = "scaled_fp8"
METADATA_KEY = "_quantization_metadata"
FP8_NAMES = {"F8_E4M3": "float8_e4m3fn", "F8_E4M3FN": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_OLD = (".scale_weight", ".scale_input")
_NEW = (".weight_scale", ".input_scale", ".comfy_quant", ".weight_scale_2")


@dataclass(frozen=True)
class LayerScale:
    """One scaled weight: the keys of its scale, its input scale and its ``comfy_quant`` record."""

    weight: str
    scale: str | None
    input_scale: str | None
    config: str | None  # key of the comfy_quant tensor
    fp8_matmul: bool


@dataclass(frozen=True)
class ScaledLayout:
    style: str  # "scaled_fp8" | "comfy_quant"
    layers: dict[str, LayerScale]  # weight key -> its scales
    consumed: frozenset[str]  # marker, scale and config keys: not part of the network
    formats: dict[str, str]  # layer -> format named by _quantization_metadata

    def __len__(self) -> int:
        return len(self.layers)


def _is_marker(key: str) -> bool:
    return key == MARKER or key.endswith("." + MARKER)


def _unsupported(name: str, why: str) -> FileFormatError:
    return FileFormatError(
        f"{name} is quantized in a way Loadout cannot compute",
        why=why,
        fix="Use the file's fp8_scaled, fp8, GGUF or fp16/bf16 version",
        code="unsupported_format",
    )


def _metadata_layers(metadata: Mapping[str, Any], name: str) -> dict[str, str]:
    raw = metadata.get(METADATA_KEY)
    if not isinstance(raw, str):
        return {}
    try:
        layers = json.loads(raw).get("layers", {})
        return {str(k): str(v["format"] if isinstance(v, dict) else v) for k, v in layers.items()}
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise FileFormatError(
            f"{name}: its {METADATA_KEY} header entry cannot be read",
            why=f"it is not the JSON ComfyUI writes ({exc})",
            fix="Download the file again",
            code="invalid_file",
        ) from None


def read_layout(
    tensors: Mapping[str, TensorInfo], metadata: Mapping[str, Any], name: str
) -> ScaledLayout | None:
    """The scaled layers of a file from its tensor infos and header alone (no data read); None when
    it has none. Refuses layers it cannot compute (a scale beside a non-fp8 weight, a scale of more
    than one element, a ``_quantization_metadata`` format other than fp8)."""
    markers = [k for k in tensors if _is_marker(k)]
    formats = _metadata_layers(metadata, name)
    bases = _scaled_layers(tensors, formats)
    if not markers and not bases:
        return None
    full_precision = any(tensors[m].numel == 2 for m in markers)
    layers: dict[str, LayerScale] = {}
    consumed = set(markers)
    for layer, style in bases.items():
        old = style == "scaled_fp8"
        keys = [layer + s for s in (_OLD if old else _NEW) if layer + s in tensors]
        consumed.update(keys)
        scale = _layer_scale(tensors, layer, old, formats.get(layer), name, keys, not full_precision)
        if scale is not None:
            layers[scale.weight] = scale
    return ScaledLayout("scaled_fp8" if markers else "comfy_quant", layers, frozenset(consumed), formats)


def _scaled_layers(tensors: Mapping[str, TensorInfo], formats: Mapping[str, str]) -> dict[str, str]:
    """Each layer with scale keys beside it (or a per-layer metadata record), and its style:
    "scaled_fp8" (``.scale_weight``/``.scale_input``) or "comfy_quant"."""
    bases: dict[str, str] = {}  # layer -> style
    for key in tensors:
        for suffix in _OLD:
            if key.endswith(suffix):
                bases.setdefault(key[: -len(suffix)], "scaled_fp8")
        for suffix in _NEW:
            if key.endswith(suffix):
                bases.setdefault(key[: -len(suffix)], "comfy_quant")
    for layer in formats:
        bases.setdefault(layer, "comfy_quant")
    return bases


def _layer_scale(
    tensors: Mapping[str, TensorInfo],
    layer: str,
    old: bool,
    fmt: str | None,
    name: str,
    keys: list[str],
    fp8_matmul: bool,
) -> LayerScale | None:
    """One scaled layer's keys, refused unless its weight is fp8 with one-number scales; None for
    the input scale of a layer left unscaled."""
    weight = layer + ".weight"
    info = tensors.get(weight)
    if fmt is not None and fmt not in FP8_NAMES.values():
        raise _unsupported(name, f"layer {layer} is stored as {fmt}; Loadout reads fp8 (e4m3fn, e5m2) scales")
    if layer + ".weight_scale_2" in tensors:
        raise _unsupported(name, f"layer {layer} has two scales (nvfp4); Loadout reads per-tensor fp8 scales")
    if info is None:
        if old and keys == [layer + ".scale_input"]:
            return None  # an input scale of a layer left unscaled
        raise _unsupported(name, f"{keys[0]} has no {weight} beside it")
    if info.dtype not in FP8_NAMES:
        raise _unsupported(name, f"{weight} is {info.dtype} with a scale beside it (int8 or packed 4-bit)")
    scale = layer + (".scale_weight" if old else ".weight_scale")
    inp = layer + (".scale_input" if old else ".input_scale")
    for k in (scale, inp):
        if k in tensors and tensors[k].numel != 1:
            raise _unsupported(
                name, f"{k} holds {tensors[k].numel} numbers; Loadout reads one scale per tensor"
            )
    config = layer + ".comfy_quant"
    return LayerScale(
        weight,
        scale if scale in tensors else None,
        inp if inp in tensors else None,
        config if config in tensors else None,
        fp8_matmul,
    )


def fold(index: TensorIndex) -> TensorIndex:
    """``index`` without the scale, marker and config keys of a scaled fp8 file, its
    :class:`ScaledLayout` in ``extra["scaled_fp8"]``; ``index`` itself when it has none."""
    if index.format != "safetensors":
        return index
    layout = read_layout(index.tensors, index.metadata, index.path.name)
    if layout is None:
        return index
    tensors = {k: v for k, v in index.tensors.items() if k not in layout.consumed}
    return replace(index, tensors=tensors, extra={**index.extra, "scaled_fp8": layout})


def layout_of(index: TensorIndex) -> ScaledLayout | None:
    found = index.extra.get("scaled_fp8")
    return found if isinstance(found, ScaledLayout) else None


def _config(raw: Tensor, key: str, name: str) -> dict[str, Any]:
    try:
        conf = json.loads(bytes(raw.to(torch.uint8).reshape(-1).tolist()).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise FileFormatError(
            f"{name}: {key} is not a readable quantization record",
            why=f"ComfyUI stores JSON bytes there ({exc})",
            fix="Download the file again",
            code="invalid_file",
        ) from None
    if not isinstance(conf, dict):
        raise FileFormatError(f"{name}: {key} is not a JSON object", code="invalid_file")
    return conf


def scaled_reader(get: Callable[[str], Tensor], layout: ScaledLayout, name: str) -> Callable[[str], Tensor]:
    """``get`` (a file's tensors by key) where each scaled weight comes back as a
    :class:`ScaledFp8Weight` over the file's own fp8 view."""

    def read(key: str) -> Tensor:
        t = get(key)
        layer = layout.layers.get(key)
        if layer is None:
            return t
        fp8_matmul = layer.fp8_matmul
        fmt = layout.formats.get(key[: -len(".weight")])
        if layer.config is not None:
            conf = _config(get(layer.config), layer.config, name)
            fmt = str(conf.get("format", fmt))
            fp8_matmul = fp8_matmul and not conf.get("full_precision_matrix_mult", False)
        if fmt is not None and fmt != str(t.dtype).removeprefix("torch."):
            raise _unsupported(name, f"{key} is {t.dtype} but its record says {fmt}")
        scale = get(layer.scale) if layer.scale is not None else None
        inp = get(layer.input_scale) if layer.input_scale is not None else None
        if inp is not None and float(inp.reshape(())) == 1.0:
            inp = None  # ComfyUI drops an input scale of one
        return ScaledFp8Weight(t, scale, inp, fp8_matmul)

    return read
