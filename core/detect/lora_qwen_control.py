"""DiffSynth-Studio's In-Context Control Union LoRA for Qwen-Image
(``DiffSynth-Studio/Qwen-Image-In-Context-Control-Union``; ComfyUI's copy
``qwen_image_union_diffsynth_lora.safetensors`` in Comfy-Org/Qwen-Image-DiffSynth-ControlNets).

A plain LoRA: DiffSynth's trainer with PEFT on the Qwen-Image DiT, rank 64, on every block's
``attn.to_q/to_k/to_v/add_q_proj/add_k_proj/add_v_proj/to_out.0/to_add_out``, ``img_mlp.net.2``,
``txt_mlp.net.2``, ``img_mod.1`` and ``txt_mod.1``, written with PEFT's names and no prefix
(``transformer_blocks.0.attn.to_q.lora_A.default.weight``), bf16, no alpha (scale 1). The control
map (canny, depth, lineart, softedge, normal, openpose) reaches the model as a reference latent:
DiffSynth appends its VAE latent's tokens after the picture's (its ``context_image``), ComfyUI's
template VAE-encodes the map and gives it to both prompts with ``ReferenceLatent``.

Its weights cannot tell it from any other LoRA DiffSynth trains for Qwen-Image (its generic recipe
targets the same modules, at rank 32): only the file's name (or its folder's, DiffSynth's
``model.safetensors``) says it is the union control LoRA, as only a name tells the Qwen-Image-Edit
releases apart.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from core.detect.catalog import lora_fits

if TYPE_CHECKING:
    from core.detect.lora import LoraAnalysis
    from core.detect.types import Detection

#: the family the LoRA is made for (it goes on the families of its LoRA group)
BASE: Final = "qwen-image"
NOTE: Final = (
    "DiffSynth's In-Context Control Union LoRA for Qwen-Image (told by its name): it takes a control "
    "picture (canny, depth, lineart, softedge, normal or openpose map) as a reference latent"
)


def _words(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower())


def named_context_control(path: Path) -> bool:
    """Whether the file's name (or, for DiffSynth's ``model.safetensors``, its folder's) is the
    union control LoRA's: ``...in_context_control...`` or ``...union...diffsynth...``."""
    for name in (path.stem, path.parent.name):
        words = _words(name)
        if "in_context_control" in words or ("union" in words and "diffsynth" in words):
            return True
    return False


def union_control(path: Path, base_family: str | None) -> bool:
    """The one decision: whether the LoRA file at ``path``, made for ``base_family``, is the union
    control LoRA (a Qwen-Image LoRA by its weights, the union control LoRA by its name). The engine
    (:func:`marked`, on the stack) and ``loadout inspect`` and the library (:func:`marked_detection`)
    ask it alike."""
    return base_family is not None and lora_fits(base_family, BASE) and named_context_control(path)


def marked(analysis: LoraAnalysis, path: Path) -> LoraAnalysis:
    """``analysis`` with ``control_reference`` set for a Qwen-Image LoRA named as the union control
    LoRA (the note added to its warnings); unchanged otherwise."""
    if not union_control(path, analysis.base_family):
        return analysis
    summary = replace(analysis.summary, control="reference")
    return replace(analysis, summary=summary, control_reference=True, warnings=(*analysis.warnings, NOTE))


def marked_detection(detection: Detection, path: Path) -> Detection:
    """A LoRA file's detection as the engine takes the file: for the union control LoRA, its
    summary's ``control`` is "reference" and the note is among its warnings (detection reads the
    file's name alone, and DiffSynth's ``model.safetensors`` is named by its folder)."""
    lora = detection.lora
    if detection.kind != "lora" or lora is None or not union_control(path, detection.family):
        return detection
    warnings = (*detection.warnings, NOTE)
    return replace(detection, lora=replace(lora, control="reference"), warnings=warnings)
