"""Planning a component: which network, which config, and how its keys compare with the file.

Planning reads no tensor data: the file's tensors are stood in for by meta tensors of the right
shape and dtype, pushed through the same key conversions that loading uses, and the network is
built on the meta device. ``loadout check`` is exactly this step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.detect.keyview import KeyView
from core.detect.types import Role
from core.errors import LoadoutError, ModelMismatchError
from core.files.dtypes import DTYPES
from core.loading.architectures import Architecture, architecture_for, loadable_families
from core.loading.assign import KeyReport, compare_layout, expected_layout


class LazyTensors(Mapping[str, torch.Tensor]):
    """``{key: tensor}`` over a file's keys under ``prefix``, each read only when asked for."""

    def __init__(self, keys: list[str], get: Callable[[str], torch.Tensor], prefix: str = "") -> None:
        self._keys = keys
        self._set = set(keys)
        self._get = get
        self._prefix = prefix

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._set:
            raise KeyError(key)
        return self._get(self._prefix + key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._set


def meta_tensors(view: KeyView) -> LazyTensors:
    """Stand-ins with the file's shapes and dtypes, on the meta device (no memory, no data)."""

    def make(key: str) -> torch.Tensor:
        info = view[key]
        dt = DTYPES.get(info.dtype)
        tdt = dt.torch_dtype if dt is not None and dt.torch_dtype is not None else torch.uint8
        return torch.empty(info.shape, dtype=tdt, device="meta")

    return LazyTensors(list(view), make)


@dataclass
class ComponentPlan:
    role: Role
    family: str
    prefix: str
    layout: str
    architecture: Architecture
    config: Any
    module: nn.Module  # on the meta device until loaded
    report: KeyReport

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "family": self.family, **self.report.to_json()}


def unsupported(family: str, role: str, name: str) -> ModelMismatchError:
    return ModelMismatchError(
        f"{name}: Loadout can inspect this {role.replace('_', ' ')} ({family}) but cannot load it yet",
        why="its network is not implemented in this version",
        fix="Families that load today: " + ", ".join(loadable_families()),
        code="unsupported_family",
    )


def plan_component(
    view: KeyView, role: Role, family: str, layout: str, *, prefix: str, name: str
) -> ComponentPlan:
    """Choose and configure the network for one component and compare keys. Reads no data."""
    arch = architecture_for(family)
    if arch is None or arch.role != role:
        raise unsupported(family, role, name)
    part = role.replace("_", " ")
    try:
        converted = arch.convert_in(meta_tensors(view), layout, family)
        shapes = {k: tuple(v.shape) for k, v in converted.items() if k not in arch.harmless}
        config = arch.configure(shapes, family)
        module = arch.build(config, "meta", None)
    except (LoadoutError, KeyError, ValueError, TypeError, IndexError, RuntimeError) as exc:
        detail = exc.message if isinstance(exc, LoadoutError) else f"{type(exc).__name__}: {exc}"
        raise ModelMismatchError(
            f"{name}: the {part} does not have the layout of a {family} model",
            why=detail[:400],
            fix="The file may be damaged or hand-edited: run `loadout check` on it, or get it again",
            code="layout_mismatch",
        ) from None
    difference = arch.differs_from_family(config, family)
    if difference:
        raise ModelMismatchError(
            f"{name}: the {part} is not the {family} architecture: {difference}",
            why="weights are missing or were edited (pruned variants such as BK-SDM are not supported yet)",
            fix="Run `loadout check` on the file, or get it again",
            code="layout_mismatch",
        )
    report = compare_layout(
        expected_layout(module),
        {k: tuple(v.shape) for k, v in converted.items()},
        harmless=arch.harmless,
        optional=arch.optional,
    )
    return ComponentPlan(role, family, prefix, layout, arch, config, module, report)


def mismatch_error(plan: ComponentPlan, name: str) -> ModelMismatchError:
    r = plan.report
    parts = []
    if r.missing:
        parts.append(f"{len(r.missing)} missing (e.g. {r.missing[0]})")
    if r.unexpected:
        parts.append(f"{len(r.unexpected)} unexpected (e.g. {r.unexpected[0]})")
    if r.shape_mismatches:
        parts.append(f"{len(r.shape_mismatches)} with the wrong shape (e.g. {r.shape_mismatches[0]})")
    return ModelMismatchError(
        f"{name}: the {plan.role.replace('_', ' ')} does not match the {plan.family} architecture: "
        + "; ".join(parts),
        why="the file was edited, is damaged, or is a variant Loadout does not know",
        fix="Check the file against its architecture: the check report in JSON lists every difference",
        code="layout_mismatch",
    )
