"""What loading the files of image prompts shares, and the style models (kind ``style_model``:
FLUX Redux). Each network (an image encoder: :mod:`core.loading.image_encoder`; an IP-Adapter:
:mod:`core.loading.ip_adapter`; a style model: :func:`load_style_model`) is built on ``meta`` by
its architecture package's record (``core.archs.catalog``), its keys and shapes compared with the
file's one by one before any data is read (:func:`checked_module`), then filled zero-copy from the
memory-mapped file (:func:`fill`), as every model is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from core.archs.catalog import STYLE_MODELS
from core.archs.image_encoders import StyleModelArchitecture
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
class LoadedStyleModel:
    path: Path
    family: str  # the LoRA group of the diffusion models it fits ("flux")
    arch: StyleModelArchitecture
    module: nn.Module


def checked_module(
    name: str, what: str, build: Callable[[], nn.Module], found: Mapping[str, Sequence[int]]
) -> nn.Module:
    """The empty module ``build`` makes (on ``meta``) once the file's keys and shapes (``found``,
    in the module's names) match its layout one by one; refused in words otherwise."""
    try:
        module = build()
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ModelMismatchError(
            f"{name}: the file does not have the layout of {what}",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    report = compare_layout(expected_layout(module), {k: tuple(v) for k, v in found.items()})
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


def fill(
    module: nn.Module, index: TensorIndex, component: str, opts: LoadOptions,
    read: Callable[[str, Callable[[str], torch.Tensor]], torch.Tensor] | None = None,
) -> None:  # fmt: skip
    """Every tensor of ``module`` from the file (``read(key, get)`` where it is not under the
    module's own name there), zero-copy; the module left in eval mode."""
    source = _Source(index)
    get = source.get if read is None else (lambda key: read(key, source.get))
    keys = {k: k for k in module.state_dict(keep_vars=True)}
    assign_weights(
        module, get, keys, component=component, dtype=opts.dtype, device=opts.device,
        check=opts.check, progress=opts.progress,
    )  # fmt: skip
    module.eval()


def file_shapes(index: TensorIndex) -> dict[str, tuple[int, ...]]:
    return {k: tuple(info.shape) for k, info in index.tensors.items()}


def load_style_model(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedStyleModel:
    """Load a style model file (FLUX Redux); refuses another kind of file, a style model of a
    family Loadout does not run and a damaged layout (before reading any data)."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if det.kind != "style_model":
        raise _wrong_kind(name, det, "style_model")
    arch = STYLE_MODELS.get(det.family)
    if arch is None:
        raise ModelMismatchError(
            f"{name} is a style model Loadout cannot run ({det.family})",
            why="the style models Loadout runs are: " + ", ".join(r.title for r in STYLE_MODELS),
            fix="Use one of those files",
            code="unsupported_family",
        )
    _refuse_unloadable_format(index)
    shapes = file_shapes(index)
    build = lambda: arch.build(arch.configure(shapes), "meta", None)  # noqa: E731
    module = checked_module(name, arch.title, build, shapes)
    fill(module, index, f"style model ({arch.title})", opts)
    return LoadedStyleModel(index.path, arch.id, arch, module)
