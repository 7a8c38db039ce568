"""The inputs of :func:`core.patching.keymap.match_lora` from file headers alone.

An adapter file becomes its :class:`~core.detect.lora.LoraAnalysis`; a model file becomes its
diffusion model and text encoders as planned for loading (networks built on the meta device, so
the key shapes and configs are exactly those of the loaded model), without reading tensor data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from core.detect.keyview import KeyView
from core.detect.lora import LoraAnalysis, analyze_lora
from core.detect.types import Component
from core.errors import LoadoutError, ModelMismatchError
from core.files.model_file import TensorIndex, read_tensor_index
from core.loading.loader import inspect_for_loading
from core.loading.plan import plan_component
from core.patching.keymap_index import Shape

ComponentSpec = tuple[str, str, Mapping[str, Shape], Any]


def lora_analysis(path: str | os.PathLike[str]) -> LoraAnalysis:
    """The adapter file's module records; raises ModelMismatchError when it is no adapter."""
    index = read_tensor_index(path)
    metadata = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    analysis = analyze_lora(KeyView(index.tensors), metadata)
    if analysis is None:
        raise ModelMismatchError(
            f"{index.path.name} is not a LoRA or other adapter file",
            why="its tensor names are not those of adapter factors (lora_up/lora_down, lora_A/lora_B, ...)",
            fix="Pick a LoRA file; run `loadout inspect` on this one to see what it is",
            code="wrong_kind",
        )
    return analysis


def _view(index: TensorIndex, comp: Component) -> KeyView:
    whole = KeyView(index.tensors)
    if comp.prefix:
        return whole.sub(comp.prefix)
    if comp.exclude:
        return KeyView({k: v for k, v in index.tensors.items() if not k.startswith(comp.exclude)})
    return whole


def header_components(path: str | os.PathLike[str]) -> tuple[list[ComponentSpec], str | None, list[str]]:
    """(components, model family, warnings) of a checkpoint, diffusion-model or text-encoder file.

    A text encoder Loadout cannot build is left out with a warning (its adapter modules are then
    reported unmatched); a diffusion model it cannot build raises, as loading would.
    """
    index, det = inspect_for_loading(path)
    name = index.path.name
    if det.kind == "lora":
        raise ModelMismatchError(
            f"{name} is a LoRA, not a model to apply one to",
            why="the base of a LoRA match must be a checkpoint, diffusion model or text encoder",
            fix="Pick the model file as the base and the LoRA as the adapter",
            code="wrong_kind",
        )
    components: list[ComponentSpec] = []
    warnings: list[str] = []
    for comp in det.components:
        if comp.role not in ("diffusion_model", "text_encoder"):
            continue
        try:
            plan = plan_component(
                _view(index, comp), comp.role, comp.family, comp.layout, prefix=comp.prefix, name=name
            )
        except LoadoutError as exc:
            if comp.role == "diffusion_model":
                raise
            warnings.append(f"text encoder {comp.family} left out: {exc.message}")
            continue
        shapes = {k: tuple(v.shape) for k, v in plan.module.state_dict().items()}
        components.append((comp.role, comp.family, shapes, plan.config))
    if not components:
        raise ModelMismatchError(
            f"{name} holds no diffusion model or text encoder",
            why=f"it was detected as {det.kind.replace('_', ' ')}",
            fix="Pick a checkpoint, diffusion model or text encoder file as the base",
            code="wrong_kind",
        )
    return components, det.family, warnings
