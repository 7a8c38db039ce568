"""The workflows beside text-to-image, wired into one generation through a session: the ControlNets
(loaded once per session, placed with the diffusion model for the "sample" phase), the inpainting
mask and the PNG parameters that name what was used.

``session_run.generate`` calls :func:`prepare` once its pipeline and hooks exist; everything a
workflow changes is on the pipeline (its adapter's ControlNets, its noise mask, its inpaint
channels) or in the parts the phases place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from core.generate import controlnet as cn
from core.generate.events import Phase
from core.generate.inpaint import prepare_inpaint
from core.generate.pipeline import Hooks, Pipeline
from core.generate.request import ImageSettings
from core.session.session import Session


class Parts(Protocol):
    family: str
    objects: dict[Phase, list[object]]  # phase -> the models it places
    names: dict[str, str]  # the manager's model names -> role


@dataclass
class WorkflowState:
    """What the workflows keep between generations of one session."""

    controlnets: cn.ControlNetCache = field(default_factory=cn.ControlNetCache)


@dataclass
class Prepared:
    parameters: dict[str, str] = field(default_factory=dict)  # A1111 infotext items


def _num(v: float) -> str:
    return f"{v:g}"


def controlnet_parameter(
    index: int, name: str, use_strength: float, start: float, end: float
) -> tuple[str, str]:
    """A1111's sd-webui-controlnet infotext item: ``ControlNet 0: "Module: none, Model: ..., ..."``."""
    text = (
        f"Module: none, Model: {name}, Weight: {_num(use_strength)}, Resize Mode: Crop and Resize, "
        f"Guidance Start: {_num(start)}, Guidance End: {_num(end)}"
    )
    return f"ControlNet {index}", text


def _controlnets(
    session: Session, state: WorkflowState, settings: ImageSettings, parts: Parts, pipeline: Pipeline,
    check: Callable[[], None],
) -> dict[str, str]:  # fmt: skip
    placement = session.placement
    uses = settings.controlnets
    wanted = {Path(u.path).resolve() for u in uses}
    for gone in state.controlnets.keep_only(wanted):
        placement.release(gone.module)
    if not uses:
        return {}
    loaded = [state.controlnets.get(u.path, check) for u in uses]
    for net in loaded:
        cn.check_fits(net, parts.family)
        name = f"{net.path.stem} ControlNet"
        if placement.active and placement.manager.find(net.module) is None:
            placement.register(net.module, name)
        parts.names[name] = "controlnet"
        if net.module not in parts.objects["sample"]:
            parts.objects["sample"].append(net.module)
    pipeline.adapter.control = cn.applied(uses, loaded, pipeline.sampling)
    return dict(
        controlnet_parameter(i, Path(u.path).stem, u.strength, u.start, u.end) for i, u in enumerate(uses)
    )


def prepare(
    session: Session,
    state: WorkflowState,
    settings: ImageSettings,
    parts: Parts,
    pipeline: Pipeline,
    hooks: Hooks,
    init: np.ndarray | None,
) -> Prepared:
    """Set up this generation's workflows on ``pipeline`` and ``parts`` (see the module notes)."""
    out = Prepared()
    out.parameters |= _controlnets(session, state, settings, parts, pipeline, hooks.check)
    if settings.mask_image is not None and init is not None:
        out.parameters |= prepare_inpaint(pipeline, settings.mask_image, init, hooks)
    return out


@dataclass(frozen=True)
class ControlNetParameters:
    """One ControlNet as a picture's parameters name it (A1111's ``ControlNet N`` item)."""

    model: str
    weight: float
    start: float
    end: float


def controlnets_in(extra: dict[str, str]) -> tuple[ControlNetParameters, ...]:
    """The ``ControlNet 0``, ``ControlNet 1``... items of an infotext's extra keys, in order;
    items that do not read as A1111's form are left out."""
    found: list[tuple[int, ControlNetParameters]] = []
    for key, text in extra.items():
        if not key.startswith("ControlNet ") or not key[11:].isdigit():
            continue
        fields = dict(part.split(":", 1) for part in text.split(", ") if ":" in part)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        try:
            item = ControlNetParameters(
                fields["Model"],
                float(fields.get("Weight", "1")),
                float(fields.get("Guidance Start", "0")),
                float(fields.get("Guidance End", "1")),
            )
        except (KeyError, ValueError):
            continue
        found.append((int(key[11:]), item))
    return tuple(item for _, item in sorted(found, key=lambda p: p[0]))
