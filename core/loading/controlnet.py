"""Loading a ControlNet file (SD1.x / SD2.x / SDXL): lllyasviel's original layout (with or without
``control_model.``) and diffusers' ControlNetModel layout, detected by ``inspect`` as kind
``controlnet``; the DiT ControlNets an architecture package brings (Z-Image's Fun ControlNet) by
its loader record (:func:`_load_packaged`). The network is built on the meta device and filled
zero-copy from the memory-mapped file, as every other model is; keys and shapes are compared before
any data is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from core.archs.keymaps import KeyMapping, convert_shapes, merge_tensors
from core.detect.catalog import CONTROLNETS_FOR, UNET_CONTROLNETS, controlnet_applies
from core.detect.keyview import KeyView
from core.detect.types import Detection
from core.errors import ModelMismatchError
from core.files.model_file import TensorIndex
from core.loading.assign import KeyReport, assign_weights, compare_layout, expected_layout
from core.loading.convert.unet_diffusers import unet_original_key_map
from core.loading.loader import (
    LoadOptions,
    _refuse_unloadable_format,
    _Source,
    _wrong_kind,
    inspect_for_loading,
)
from core.loading.plan import LazyTensors, meta_tensors
from core.models.controlnet import HINT_LAYERS, ControlNetConfig, ControlNetModel
from core.models.unet import UNetConfig

T = TypeVar("T")


@dataclass
class LoadedControlNet:
    path: Path
    family: str  # the diffusion family it is for
    layout: str
    module: Any  # an nn.Module that is a core.archs.control.ControlModule
    #: a union ControlNet's control types by name, in index order
    control_types: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.module.state_dict().values())


def controlnet_key_map(config: ControlNetConfig) -> dict[str, str]:
    """diffusers name -> original name for every tensor of a ControlNet with ``config``."""
    sides = ("input_blocks.", "middle_block.", "time_embed.", "label_emb.")
    out = {k: v for k, v in unet_original_key_map(config.unet).items() if v.startswith(sides)}
    hint = ["controlnet_cond_embedding.conv_in"]
    hint += [f"controlnet_cond_embedding.blocks.{i}" for i in range(len(HINT_LAYERS))]
    hint.append("controlnet_cond_embedding.conv_out")
    for n, src in enumerate(hint):
        for p in ("weight", "bias"):
            out[f"{src}.{p}"] = f"input_hint_block.{2 * n}.{p}"
    for i in range(config.blocks):
        for p in ("weight", "bias"):
            out[f"controlnet_down_blocks.{i}.{p}"] = f"zero_convs.{i}.0.{p}"
    for p in ("weight", "bias"):
        out[f"controlnet_mid_block.{p}"] = f"middle_block_out.0.{p}"
    return out


def controlnet_diffusers_to_original(state: Mapping[str, T], config: ControlNetConfig) -> dict[str, T]:
    """The same tensors (or shapes) under original names; keys that do not map are left out
    (the layout comparison names them)."""
    key_map = controlnet_key_map(config)
    return {key_map[k]: v for k, v in state.items() if k in key_map}


def _config_from_fields(fields: Mapping[str, Any]) -> ControlNetConfig:
    """The network a diffusers ControlNet describes, from what detection read of its shapes."""
    middle = int(fields["transformer_depth_middle"])
    context = fields.get("context_dim")
    nrb = tuple(fields["num_res_blocks"])
    unet = UNetConfig(
        in_channels=int(fields["in_channels"]),
        out_channels=int(fields["in_channels"]),
        model_channels=int(fields["model_channels"]),
        channel_mult=tuple(fields["channel_mult"]),
        num_res_blocks=nrb,
        transformer_depth=tuple(fields["transformer_depth"]),
        transformer_depth_middle=middle if middle > 0 else None,
        transformer_depth_output=(0,) * sum(n + 1 for n in nrb),
        context_dim=context,
        num_heads=8 if context == 768 else None,
        num_head_channels=None if context == 768 else 64,
        use_linear_in_transformer=bool(fields["use_linear_in_transformer"]),
        adm_in_channels=fields.get("adm_in_channels"),
    )
    return ControlNetConfig(unet, hint_channels=int(fields.get("hint_channels") or 3))


def load_controlnet(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedControlNet:
    """Load a ControlNet file; refuses another kind of file, a ControlNet of a family that cannot
    load, and a damaged layout (before reading any data)."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    _refuse_unloadable(index, det)
    if det.family not in UNET_CONTROLNETS:
        return _load_packaged(index, det, opts)
    whole = KeyView(index.tensors)
    prefix = "control_model." if "control_model.input_blocks.0.0.weight" in whole else ""
    view = whole.sub(prefix) if prefix else whole
    config, module = _checked_module(index.path.name, det, meta_tensors(view))
    source = _Source(index)
    lazy = LazyTensors(list(view), source.get, prefix)
    get = lazy.__getitem__
    if det.layout == "diffusers":
        original = {v: k for k, v in controlnet_key_map(config).items()}
        get = lambda key: lazy[original[key]]  # noqa: E731 - read one tensor when it is assigned
    _fill(module, get, det, opts)
    return LoadedControlNet(index.path, det.family or "", det.layout or "original", module)


def _fill(
    module: torch.nn.Module, get: Callable[[str], torch.Tensor], det: Detection, opts: LoadOptions
) -> None:
    """Every weight of ``module`` from ``get`` (zero-copy views of the mapped file where the dtype
    allows), then evaluation mode."""
    assign_weights(
        module,
        get,
        {k: k for k in module.state_dict(keep_vars=True)},
        component=f"controlnet ({det.family})",
        dtype=opts.dtype,
        device=opts.device,
        check=opts.check,
        progress=opts.progress,
    )
    module.eval()


def _refuse_unloadable(index: TensorIndex, det: Detection) -> None:
    """Another kind of file, a ControlNet of a family that cannot load, a format that cannot."""
    name = index.path.name
    if det.kind != "controlnet":
        raise _wrong_kind(name, det, "controlnet")
    # the ControlNet families that load are the table's (catalog.CONTROLNETS_FOR)
    if det.family is None or not controlnet_applies(det.family):
        raise ModelMismatchError(
            f"{name} is a ControlNet for {det.family}, which Loadout cannot apply yet",
            why="Loadout applies ControlNets to models of these families: " + ", ".join(CONTROLNETS_FOR),
            fix="Use a ControlNet made for one of those (docs/families.md)",
            code="unsupported_family",
        )
    _refuse_unloadable_format(index)


def _checked_module(
    name: str, det: Detection, meta: Mapping[str, torch.Tensor]
) -> tuple[ControlNetConfig, ControlNetModel]:
    """The ControlNet's config from the file's shapes (or its diffusers fields), and an empty
    module of it whose layout the file's tensors match exactly; refused before any data is read."""
    try:
        if det.layout == "diffusers":
            config = _config_from_fields(det.fields)
            meta_state: Mapping[str, Any] = controlnet_diffusers_to_original(meta, config)
        else:
            config = ControlNetConfig.from_shapes({k: tuple(v.shape) for k, v in meta.items()})
            meta_state = meta
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelMismatchError(
            f"{name}: the ControlNet does not have the layout of a {det.family} ControlNet",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    module = ControlNetModel(config, device="meta")
    found = {k: tuple(v.shape) for k, v in meta_state.items()}
    if det.layout == "diffusers":  # keys the map did not take are the file's, unexpected
        key_map = controlnet_key_map(config)
        found |= {k: tuple(meta[k].shape) for k in meta if k not in key_map}
    _refuse_other_layout(name, det, compare_layout(expected_layout(module), found))
    return config, module


def _refuse_other_layout(name: str, det: Detection, report: KeyReport) -> None:
    if not report.ok:
        bad = (report.missing or report.unexpected or report.shape_mismatches)[0]
        raise ModelMismatchError(
            f"{name}: the ControlNet does not match the {det.family} ControlNet architecture",
            why=f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
            f"{len(report.shape_mismatches)} with the wrong shape (e.g. {bad})",
            fix="The file may be damaged or another kind of adapter: run `loadout inspect` on it",
            code="layout_mismatch",
        )


def _load_packaged(index: TensorIndex, det: Detection, opts: LoadOptions) -> LoadedControlNet:
    """A ControlNet an architecture package brings (:class:`core.archs.control.ControlNetLoader`):
    built on the meta device from the file's shapes, its layout compared key by key, filled from the
    mapped file."""
    from core.archs.catalog import controlnet_loader

    name = index.path.name
    kind = controlnet_loader(det.family, det.layout)
    if kind is None:
        raise ModelMismatchError(
            f"{name} is a {det.family} ControlNet in a layout Loadout cannot apply yet ({det.layout})",
            why="no ControlNet kind Loadout knows reads this file's layout",
            fix="Use another release of this ControlNet (docs/families.md lists the ones that load)",
            code="unsupported_family",
        )
    meta = meta_tensors(KeyView(index.tensors))
    try:
        built = kind.build({k: tuple(v.shape) for k, v in meta.items()}, det)
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelMismatchError(
            f"{name}: the ControlNet does not have the layout of a {det.family} ControlNet",
            why=f"{type(exc).__name__}: {exc}"[:400],
            fix="The file may be damaged: run `loadout inspect` on it, or get it again",
            code="layout_mismatch",
        ) from None
    if not isinstance(built, torch.nn.Module):
        raise TypeError(f"the {kind.id} ControlNet kind built no torch module")
    module: torch.nn.Module = built
    rows = kind.key_rows(module) if kind.key_rows is not None else None
    lazy = LazyTensors(list(index.tensors), _Source(index).get, "")
    if rows is not None:  # module tensors fused from several of the file's
        found, get = _rows_layout(name, det, rows, meta, lazy)
    else:  # one file tensor per module tensor, or several joined along dim 0 (diffusers' q, k, v)
        keys = dict(kind.key_map(module)) if kind.key_map is not None else None
        to_file = keys if keys is not None else {k: k for k in module.state_dict(keep_vars=True)}
        found = _found_shapes({k: tuple(v.shape) for k, v in meta.items()}, to_file)
        get = lambda key: _joined(lazy, to_file[key])  # noqa: E731 - read one tensor when it is assigned
    _refuse_other_layout(name, det, compare_layout(expected_layout(module), found))
    _fill(module, get, det, opts)
    layout = det.layout or "original"
    # a kind's control types are its union files' (a module without a union embedding has none)
    types = kind.control_types if getattr(module, "union", True) else ()
    return LoadedControlNet(index.path, det.family or "", layout, module, types)


def _rows_layout(
    name: str,
    det: Detection,
    rows: tuple[KeyMapping, ...],
    meta: Mapping[str, torch.Tensor],
    lazy: LazyTensors,
) -> tuple[dict[str, tuple[int, ...]], Callable[[str], torch.Tensor]]:
    """The module-side shapes a file's tensors make through ``rows``, and a getter that makes each
    module tensor (one file tensor read as it is, several concatenated); refused in words when the
    file's keys do not fit the rows."""
    try:
        found = convert_shapes({k: tuple(v.shape) for k, v in meta.items()}, rows, model="ControlNet")
    except ModelMismatchError as exc:
        raise ModelMismatchError(
            f"{name}: the ControlNet does not match the {det.family} ControlNet architecture",
            why=exc.why or str(exc),
            fix="The file may be damaged or another kind of adapter: run `loadout inspect` on it",
            code="layout_mismatch",
        ) from None
    by_key = {row.original: row for row in rows}

    def get(key: str) -> torch.Tensor:
        row = by_key[key]
        if len(row.diffusers) == 1 and not row.swap_halves:
            return lazy[row.diffusers[0]]
        return merge_tensors(row, [lazy[k] for k in row.diffusers])

    return found, get


def _found_shapes(
    shapes: Mapping[str, tuple[int, ...]], to_file: Mapping[str, str | tuple[str, ...]]
) -> dict[str, tuple[int, ...]]:
    """The file's shapes under the module's keys (tensors joined along dim 0 where the key map
    joins them); file keys no module key takes keep their names (unexpected)."""
    found: dict[str, tuple[int, ...]] = {}
    used: set[str] = set()
    for mkey, fkeys in to_file.items():
        parts = (fkeys,) if isinstance(fkeys, str) else fkeys
        if all(p in shapes for p in parts):
            first = shapes[parts[0]]
            rest = {shapes[p][1:] for p in parts}
            joined = (sum(shapes[p][0] for p in parts), *first[1:]) if len(rest) == 1 else (-1,)
            found[mkey] = joined
            used.update(parts)
    found.update({k: v for k, v in shapes.items() if k not in used})
    return found


def _joined(lazy: Mapping[str, torch.Tensor], keys: str | tuple[str, ...]) -> torch.Tensor:
    """A module tensor from the file: one tensor (zero-copy) or several concatenated."""
    if isinstance(keys, str):
        return lazy[keys]
    return torch.cat([lazy[k] for k in keys], dim=0)
