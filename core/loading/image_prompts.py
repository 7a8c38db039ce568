"""Loading the files image prompts need: an image encoder (kind ``image_encoder``: SigLIP for FLUX
Redux) and a style model (kind ``style_model``: FLUX Redux). Each network is built on ``meta`` by
its architecture package's record (``core.archs.catalog``: ``IMAGE_ENCODERS``, ``STYLE_MODELS``),
its keys and shapes compared with the file's one by one before any data is read (keys the record
knows and does not load, such as SigLIP's pooling head, are ignored by name), then filled
zero-copy from the memory-mapped file, as every model is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from core.archs.catalog import IMAGE_ENCODERS, STYLE_MODELS
from core.archs.image_prompts import ImageEncoderArchitecture, StyleModelArchitecture
from core.detect.types import Detection
from core.errors import ModelMismatchError
from core.files.model_file import TensorIndex
from core.loading.assign import assign_weights, compare_layout, expected_layout
from core.loading.loader import (
    LoadOptions,
    _refuse_unloadable_format,
    _Source,
    _wrong_kind,
    inspect_for_loading,
)


@dataclass(eq=False)  # one per loaded file: told apart by identity
class LoadedImageEncoder:
    path: Path
    family: str
    record: ImageEncoderArchitecture
    module: nn.Module


@dataclass(eq=False)
class LoadedStyleModel:
    path: Path
    family: str  # the LoRA group of the diffusion models it fits ("flux")
    record: StyleModelArchitecture
    module: nn.Module


def _checked_module(
    name: str, what: str, configure: Callable[[Any], Any], build: Callable[..., nn.Module],
    shapes: Mapping[str, tuple[int, ...]], ignored: Callable[[str], bool],
) -> nn.Module:  # fmt: skip
    """An empty module of the file's config whose layout the file's keys match one by one."""
    try:
        module = build(configure(shapes), "meta", None)
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelMismatchError(
            f"{name}: the file does not have the layout of {what}",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    found = {k: v for k, v in shapes.items() if not ignored(k)}
    report = compare_layout(expected_layout(module), found)
    if not report.ok:
        bad = (report.missing or report.unexpected or report.shape_mismatches)[0]
        raise ModelMismatchError(
            f"{name}: the file does not match the {what} architecture",
            why=f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
            f"{len(report.shape_mismatches)} with the wrong shape (e.g. {bad})",
            fix="The file may be damaged or of another model: run `loadout inspect` on it",
            code="layout_mismatch",
        )
    return module


def _fill(module: nn.Module, index: TensorIndex, component: str, opts: LoadOptions) -> None:
    source = _Source(index)
    keys = {k: k for k in module.state_dict(keep_vars=True)}
    assign_weights(
        module, source.get, keys, component=component, dtype=opts.dtype, device=opts.device,
        check=opts.check, progress=opts.progress,
    )  # fmt: skip
    module.eval()


def _shapes(index: TensorIndex) -> dict[str, tuple[int, ...]]:
    return {k: tuple(info.shape) for k, info in index.tensors.items()}


def _unknown_family(name: str, det: Detection, kind: str, known: str) -> ModelMismatchError:
    return ModelMismatchError(
        f"{name} is {kind} Loadout cannot run ({det.family})",
        why=f"the {kind.split(' ', 1)[1]}s Loadout runs are: {known}",
        fix="Use one of those files",
        code="unsupported_family",
    )


def load_image_encoder(
    path: str | os.PathLike[str], options: LoadOptions | None = None
) -> LoadedImageEncoder:
    """Load an image encoder file; refuses another kind of file, an encoder of a family Loadout
    does not run and a damaged layout (before reading any data)."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if det.kind != "image_encoder":
        raise _wrong_kind(name, det, "image_encoder")
    record = IMAGE_ENCODERS.get(det.family)
    if record is None:
        raise _unknown_family(name, det, "an image encoder", ", ".join(r.title for r in IMAGE_ENCODERS))
    _refuse_unloadable_format(index)
    module = _checked_module(
        name, record.title, record.configure, record.build, _shapes(index), record.ignored
    )
    _fill(module, index, f"image encoder ({record.id})", opts)
    return LoadedImageEncoder(index.path, record.id, record, module)


def load_style_model(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedStyleModel:
    """Load a style model file (FLUX Redux), refused as :func:`load_image_encoder` refuses."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if det.kind != "style_model":
        raise _wrong_kind(name, det, "style_model")
    record = STYLE_MODELS.get(det.family)
    if record is None:
        raise _unknown_family(name, det, "a style model", ", ".join(r.title for r in STYLE_MODELS))
    _refuse_unloadable_format(index)
    module = _checked_module(
        name, record.title, record.configure, record.build, _shapes(index), lambda k: False
    )
    _fill(module, index, f"style model ({record.title})", opts)
    return LoadedStyleModel(index.path, record.id, record, module)
