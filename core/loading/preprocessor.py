"""Loading a preprocessor model file (Depth Anything V2 ...): detected as kind ``preprocessor_model``,
its network (the family's :class:`~core.archs.preprocessors.PreprocessorNet`, found through the
catalog) built on the meta device, the file's keys and shapes compared with it key by key before
any data is read, then filled zero-copy from the memory-mapped safetensors file, one tensor at a
time as it is assigned. Only safetensors files are read: a pickle (``.pth``) is refused in words."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from core.archs.catalog import PREPROCESSOR_NETS
from core.archs.preprocessors import PreprocessorNet
from core.errors import FileFormatError, ModelMismatchError
from core.loading.assign import assign_weights, compare_layout, expected_layout
from core.loading.loader import LoadOptions, _Source, _wrong_kind, inspect_for_loading


@dataclass
class LoadedPreprocessor:
    path: Path
    family: str
    layout: str
    net: PreprocessorNet
    config: object
    module: nn.Module

    @property
    def name(self) -> str:
        """What the memory manager calls it."""
        return f"{self.path.stem} preprocessor"


def _refuse_pickle(name: str, fmt: str) -> FileFormatError:
    return FileFormatError(
        f"{name} is a {fmt} file; Loadout reads preprocessor models only as safetensors",
        why="a pickle file can run code when it is loaded, and these models are published as safetensors too",
        fix="Download the .safetensors version of the model, or convert this file to safetensors "
        "with Loadout's convert (which reads pickles through its restricted reader)",
        code="unsupported_format",
    )


def load_preprocessor(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedPreprocessor:
    """Load a preprocessor model; refuses another kind of file, a pickle, and a layout that does
    not match its network key by key (before reading any data)."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    name = index.path.name
    if index.format != "safetensors" and det.kind in ("preprocessor_model", "unknown"):
        raise _refuse_pickle(name, index.format)
    if det.kind != "preprocessor_model":
        raise _wrong_kind(name, det, "preprocessor_model")
    if index.format != "safetensors":
        raise _refuse_pickle(name, index.format)
    net = PREPROCESSOR_NETS.get(det.family)
    if net is None:
        raise ModelMismatchError(
            f"{name} is a {det.family} model, which Loadout cannot run yet",
            fix=f"Use a model of: {', '.join(n.title for n in PREPROCESSOR_NETS)}",
            code="unsupported_family",
        )
    layout = det.layout or "original"
    shapes = {k: tuple(v.shape) for k, v in index.tensors.items()}
    try:
        config = net.config(shapes, layout)
    except (KeyError, ValueError, IndexError) as exc:
        raise ModelMismatchError(
            f"{name} does not hold a complete {net.title} network",
            why=f"{type(exc).__name__}: {exc}"[:300],
            fix="The file may be damaged or cut short: get it again",
            code="layout_mismatch",
        ) from None
    module = net.build(config, "meta")
    sources = net.sources(config, layout, list(module.state_dict(keep_vars=True)))
    report = compare_layout(expected_layout(module), net.file_shapes(shapes, sources, layout))
    if not report.ok:
        bad = (report.missing or report.unexpected or report.shape_mismatches)[0]
        raise ModelMismatchError(
            f"{name} does not match the {net.title} network",
            why=f"{len(report.missing)} weights missing, {len(report.unexpected)} unexpected, "
            f"{len(report.shape_mismatches)} with the wrong shape (e.g. {bad})",
            fix="The file may be damaged or another model: get it again",
            code="layout_mismatch",
        )
    source = _Source(index)

    def get(key: str) -> torch.Tensor:
        file_key, part = sources[key]
        t = source.get(file_key)
        if part is None:
            return t
        rows = t.shape[0] // 3
        return t.narrow(0, part * rows, rows)  # a view of the fused rows: no copy

    assign_weights(
        module, get, {k: k for k in sources}, component=f"{net.title} ({name})",
        dtype=opts.dtype, device=opts.device, check=opts.check, progress=opts.progress,
    )  # fmt: skip
    module.eval()
    return LoadedPreprocessor(index.path, net.id, layout, net, config, module)
