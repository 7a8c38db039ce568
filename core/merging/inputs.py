"""The models a merge reads: each file's header and detection, the keys of its diffusion model and
text encoders, and the refusals (a file that is not a model, another family, other keys or shapes,
quantized weights), all from headers before any tensor is read.

Keys are matched per part by their name inside the part (``input_blocks.4.1.proj_in.weight``),
so a checkpoint merges with a diffusion-model file of the same family: the output keeps A's keys,
A's VAE and everything else A holds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.detect.catalog import REGISTRY
from core.detect.detector import detect
from core.detect.types import Component, Detection, kind_phrase
from core.errors import FileFormatError, ModelMismatchError
from core.files.model_file import TensorIndex, read_tensor_index
from core.files.tensor_info import TensorInfo
from core.quant.scaled_fp8 import fold, layout_of

#: the models' names in messages and in the recipe, in order
NAMES = ("A", "B", "C")
#: text-encoder keys ComfyUI's CLIPMerge nodes never merge (model A's are kept)
TEXT_KEPT = (".position_ids", ".logit_scale")


@dataclass(frozen=True)
class MergeInput:
    """One model of a merge: ``parts`` maps a part ("diffusion_model", or "text_encoder:clip-l")
    to {key inside the part: key in the file}."""

    name: str  # "A", "B", "C"
    path: Path
    index: TensorIndex
    detection: Detection
    parts: dict[str, dict[str, str]]

    @property
    def family(self) -> str:
        assert self.detection.family is not None
        return self.detection.family

    def info(self, key: str) -> TensorInfo:
        return self.index.tensors[key]


def _part_keys(index: TensorIndex, comp: Component) -> dict[str, str]:
    if comp.prefix:
        n = len(comp.prefix)
        return {k[n:]: k for k in index.tensors if k.startswith(comp.prefix)}
    return {k: k for k in index.tensors if not (comp.exclude and k.startswith(comp.exclude))}


def _refuse_format(name: str, path: Path, index: TensorIndex) -> None:
    if index.format == "gguf":
        raise FileFormatError(
            f"model {name}, {path.name}, is a quantized GGUF file",
            why="merging adds weights, and GGML blocks are not weights until dequantized; Loadout "
            "never requantizes",
            fix="Merge the fp16/bf16 safetensors release of that model, or convert this file to an "
            "fp16 or bf16 safetensors copy first",
            code="quantized_source",
        )
    if index.format != "safetensors":
        raise FileFormatError(
            f"model {name}, {path.name}, is a {index.format} file",
            why="a merge streams its models tensor by tensor from memory-mapped safetensors files",
            fix="Convert it to safetensors first",
            code="unsupported_format",
        )
    scaled = layout_of(fold(index))
    if scaled is not None:
        raise FileFormatError(
            f"model {name}, {path.name}, holds scaled fp8 weights",
            why="its fp8 values need their scales beside them to be weights, and Loadout never "
            "requantizes the merged result",
            fix="Merge the fp16/bf16 release of that model, or convert this file to fp16 or bf16 first",
            code="quantized_source",
        )


def open_model(name: str, path: str | os.PathLike[str]) -> MergeInput:
    """Read and check one model's header (no tensor data)."""
    p = Path(path)
    index = read_tensor_index(p)
    _refuse_format(name, p, index)
    meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    det = detect(index.tensors, meta, p.name)
    if det.kind not in ("checkpoint", "diffusion_model") or det.family is None:
        raise ModelMismatchError(
            f"model {name}, {p.name}, is {kind_phrase(det.kind)}",
            why="a merge takes checkpoints or diffusion models of one family",
            fix="Name checkpoint or diffusion-model files",
            code="wrong_kind",
        )
    parts: dict[str, dict[str, str]] = {}
    for comp in det.components:
        if comp.role == "diffusion_model":
            parts["diffusion_model"] = _part_keys(index, comp)
        elif comp.role == "text_encoder":
            parts[f"text_encoder:{comp.family}"] = _part_keys(index, comp)
    return MergeInput(name, p, index, det, parts)


def _title(family: str) -> str:
    fam = REGISTRY.get(family)
    return fam.title if fam is not None else family


def check_same_model(models: Sequence[MergeInput], parts: Sequence[str]) -> None:
    """Every model is of A's family and has A's keys and shapes in ``parts``; refused in words,
    naming the first key that differs."""
    a = models[0]
    for m in models[1:]:
        if m.family != a.family:
            raise ModelMismatchError(
                f"model {a.name} is {_title(a.family)} and model {m.name} is {_title(m.family)}",
                why="only models of one family have the same weights to merge",
                fix="Merge models of the same family",
                code="wrong_model",
            )
        for part in parts:
            _check_part(a, m, part)


def _check_part(a: MergeInput, m: MergeInput, part: str) -> None:
    mine, theirs = a.parts.get(part), m.parts.get(part)
    what = part.replace("_", " ").replace("text encoder:", "text encoder ")
    if mine is None or theirs is None:
        lacking = a if mine is None else m
        raise ModelMismatchError(
            f"model {lacking.name}, {lacking.path.name}, has no {what}",
            why="the text encoders are merged only when every model has them",
            fix="Keep model A's text encoders, or merge checkpoints that all have them",
            code="layout_mismatch",
        )
    missing = sorted(set(mine) ^ set(theirs))
    if missing:
        first = missing[0]
        where, other = (a, m) if first in mine else (m, a)
        layouts = {str(a.detection.layout), str(m.detection.layout)}
        why = (
            f"their {what}s are saved in different key layouts ({' and '.join(sorted(layouts))})"
            if len(layouts) > 1
            else f"their {what}s are built differently ({len(missing)} keys are in one only)"
        )
        raise ModelMismatchError(
            f"{where.path.name} has {where.parts[part][first]!r} and {other.path.name} has no such key",
            why=why,
            fix="Merge models with the same architecture and layout",
            code="layout_mismatch",
        )
    for key in mine:
        sa, sm = a.info(mine[key]).shape, m.info(theirs[key]).shape
        if sa != sm:
            raise ModelMismatchError(
                f"{mine[key]!r} is {list(sa)} in model {a.name} and {list(sm)} in model {m.name}",
                why="the models differ in shape there, so their weights cannot be added",
                fix="Merge models of the same architecture and size",
                code="shape_mismatch",
            )
