"""Adapter modules onto model weights, in every naming scheme trainers use.

``match_lora(analysis, components)`` takes an adapter file's module records (from
:func:`core.detect.lora.analyze_lora`, headers only) and the components of a loaded model (their
module-layout key shapes and configs) and says, for every module, which weight it patches (a
:class:`Target`, possibly a slice of a fused weight), or that it names no weight of this model
(``unmatched``), or that it does but the shapes differ (``shape_mismatches``: skipped and
reported, never an exception). ``match_lora_headers`` does the same from two file paths without
reading any tensor data: what ``loadout merge --dry-run --json`` prints.

Naming schemes handled (see :mod:`core.patching.keymap_index` for the path table): kohya
(``lora_unet_`` with original or diffusers paths, ``lora_te1_/te2_/te3_/te_``), LyCORIS
(``lycoris_``), OneTrainer (``lora_transformer_``), diffusers and PEFT (``unet.``, ``transformer.``,
``text_encoder(_2|_3).``, ``base_model.model.``, the old ``processor.to_q_lora`` form), ComfyUI
bare keys (``diffusion_model.``, ``text_encoders.clip_l.``), XLabs Flux and ai-toolkit Flux (q, k, v
onto slices of ``qkv`` / ``linear1``), SD3 diffusers (``to_q`` / ``add_q_proj`` onto slices of the
x / context block ``qkv``).

Text-encoder modules go to the encoder they were trained on: by the encoder id the analysis gives
(from the name, ``text_encoders.clip_g``, or the width) or else by the file's index (kohya ``te1``
= CLIP-L, or CLIP-H on SD2; ``te2`` = CLIP-G, or T5 on Flux; ``te3`` = T5).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core.detect.lora import LoraAnalysis, LoraModule
from core.detect.lora_flux_control import widens
from core.patching.keymap_headers import header_components, lora_analysis
from core.patching.keymap_index import (
    DIFFUSION,
    TEXT_ENCODER,
    KeyIndex,
    Offset,
    Shape,
    Target,
    model_key_index,
)

__all__ = [
    "KeyIndex",
    "MatchReport",
    "Offset",
    "Target",
    "match_lora",
    "match_lora_headers",
    "model_key_index",
]

#: (role, family, module-layout key -> shape, config) of one loaded component.
ComponentSpec = tuple[str, str, Mapping[str, Shape], Any]

_T5 = ("t5-xxl", "umt5-xxl", "t5-base")
#: Encoder index as files number them -> the encoder families it can mean, in order.
_BY_INDEX: dict[int, tuple[str, ...]] = {1: ("clip-l", "clip-h"), 2: ("clip-g",), 3: _T5}


@dataclass(frozen=True)
class MatchReport:
    """Where each module of one adapter file goes in one model."""

    matched: dict[str, Target]  # module name -> target
    unmatched: list[str]  # module names that name no weight of the model
    shape_mismatches: list[str]  # "module: adapter makes (a, b) but model weight is (c, d)"
    warnings: list[str] = field(default_factory=list)  # one line per group of skipped modules

    @property
    def total(self) -> int:
        return len(self.matched) + len(self.unmatched) + len(self.shape_mismatches)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "total": self.total,
            "matched": len(self.matched),
            "unmatched": len(self.unmatched),
            "shape_mismatches": len(self.shape_mismatches),
        }

    @property
    def by_component(self) -> dict[str, int]:
        """Matched modules per component."""
        return dict(Counter(t.component for t in self.matched.values()))

    @property
    def sliced(self) -> int:
        """Matched modules that patch a slice of a fused weight."""
        return sum(t.offset is not None for t in self.matched.values())

    def to_json(self) -> dict[str, Any]:
        return {
            **self.counts,
            "by_component": self.by_component,
            "sliced": self.sliced,
            "matched_modules": {name: t.to_json() for name, t in sorted(self.matched.items())},
            "unmatched_modules": list(self.unmatched),
            "shape_mismatch_modules": list(self.shape_mismatches),
            "warnings": list(self.warnings),
        }


# --- shapes ----------------------------------------------------------------------------------------


def _adapter_shape(m: LoraModule) -> str:
    dims: list[int | None] = [m.out_features]
    if m.in_features is not None or m.kernel is not None:
        dims.append(m.in_features)
    if m.kernel is not None:
        dims.extend(m.kernel)
    return _shape_text(["?" if d is None else str(d) for d in dims])


def _shape_text(dims: Sequence[object]) -> str:
    inner = ", ".join(str(d) for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def _fits(m: LoraModule, shape: Shape) -> bool:
    """Whether the module's difference can have the target's shape (1x1 convs and linears mix)."""
    if not shape:
        return m.out_features is None and m.in_features is None
    if m.out_features is not None and m.out_features != shape[0]:
        return False
    inputs = (shape[1], math.prod(shape[1:])) if len(shape) >= 2 else ()
    if m.in_features is not None and m.in_features not in inputs:
        return False
    spatial = tuple(shape[2:])
    pointwise = spatial in ((), (1, 1))
    if m.kernel is not None and m.kernel != (1, 1) and spatial != m.kernel:
        return False
    if m.kernel == (1, 1) and not pointwise:
        return False
    # A plain linear factor (in features == channels) cannot make a spatial kernel.
    return not (m.conv is False and not pointwise and m.in_features == shape[1])


def _mismatch(m: LoraModule, index: KeyIndex, target: Target) -> str:
    shape = index.shape_of(target)
    where = ""
    if target.offset is not None:
        dim, start, length = target.offset
        rows = f"rows {start}:{start + length}" if dim == 0 else f"dim {dim} {start}:{start + length}"
        where = f" ({rows} of {target.key})"
    return f"{m.name}: adapter makes {_adapter_shape(m)} but model weight is {_shape_text(shape)}{where}"


# --- routing ---------------------------------------------------------------------------------------


def _indexes(components: Sequence[ComponentSpec | KeyIndex]) -> list[KeyIndex]:
    out: list[KeyIndex] = []
    for c in components:
        out.append(c if isinstance(c, KeyIndex) else model_key_index(*c))
    names = Counter(i.component for i in out)
    te = 0
    for n, index in enumerate(out):
        if index.role == TEXT_ENCODER:
            te += 1
            if names[index.component] > 1:  # two encoders of one family: number them
                out[n] = _renamed(index, f"{TEXT_ENCODER}:{te}")
    return out


def _renamed(index: KeyIndex, name: str) -> KeyIndex:
    def move(paths: Mapping[str, Target]) -> dict[str, Target]:
        return {k: replace(t, component=name) for k, t in paths.items()}

    return replace(index, component=name, paths=move(index.paths), flat=move(index.flat))


def _encoders_for(m: LoraModule, encoders: list[KeyIndex]) -> tuple[list[KeyIndex], str]:
    """The text encoders a module may patch, best first, and why there are none when so."""
    if not encoders:
        return [], "the model has no text encoder"
    if m.encoder_id is not None:
        found = [e for e in encoders if e.family == m.encoder_id]
        return found, f"the model has no {m.encoder_id} text encoder"
    if m.encoder is not None:
        families = _BY_INDEX.get(m.encoder, ())
        found = [e for e in encoders if e.family in families]
        if not found and m.encoder == 2:  # kohya / ComfyUI number Flux's T5 as te2
            found = [e for e in encoders if e.family in _T5]
        if found:
            return found, ""
    return encoders, ""  # unnamed encoder: whichever holds the layer with the right shape


def _place(m: LoraModule, candidates: list[KeyIndex]) -> tuple[Target | None, str | None]:
    """(target, None) on a match; (None, mismatch text) when only shapes differ; (None, None)."""
    mismatch: str | None = None
    for index in candidates:
        target = index.resolve(m.path)
        if target is None:
            continue
        shape = index.shape_of(target)
        if _fits(m, shape):
            return target, None
        if target.offset is None and widens(m.path, (m.out_features, m.in_features), shape):
            return replace(target, pad_to=(shape[0], m.in_features or 0)), None
        mismatch = mismatch or _mismatch(m, index, target)
    return None, mismatch


def match_lora(analysis: LoraAnalysis, components: Sequence[ComponentSpec | KeyIndex]) -> MatchReport:
    """Map every module of ``analysis`` onto the weights of ``components``.

    ``components``: ``(role, family, module-layout key -> shape, config)`` per loaded component (or
    a prebuilt :class:`KeyIndex`), as a :class:`~core.loading.loader.ModelBundle` holds them.
    """
    indexes = _indexes(components)
    diffusion = [i for i in indexes if i.role == DIFFUSION][:1]
    encoders = [i for i in indexes if i.role == TEXT_ENCODER]
    matched: dict[str, Target] = {}
    unmatched: list[str] = []
    mismatches: list[str] = []
    skipped: Counter[tuple[str, str]] = Counter()  # (what modules, why) -> how many
    for m in analysis.modules:
        if m.role == TEXT_ENCODER:
            candidates, why = _encoders_for(m, encoders)
        else:
            candidates, why = diffusion, "the model has no diffusion model"
        target, mismatch = _place(m, candidates)
        if target is not None:
            matched[m.name] = target
        elif mismatch is not None:
            mismatches.append(mismatch)
            skipped[_what(m), "their shapes differ from the model's layers"] += 1
        else:
            unmatched.append(m.name)
            skipped[_what(m), why if not candidates and why else "they name no layer of the model"] += 1
    warnings = [f"{n} {what} modules skipped: {why}" for (what, why), n in skipped.most_common()]
    return MatchReport(matched, unmatched, mismatches, warnings)


def _what(m: LoraModule) -> str:
    if m.role != TEXT_ENCODER:
        return "diffusion-model"
    return f"{m.encoder_id} text-encoder" if m.encoder_id else "text-encoder"


def match_lora_headers(
    lora_path: str | os.PathLike[str], base_path: str | os.PathLike[str]
) -> tuple[MatchReport, str | None, str | None]:
    """(report, base model family, family the adapter was made for), from the two files' headers."""
    analysis = lora_analysis(lora_path)
    components, family, warnings = header_components(base_path)
    report = match_lora(analysis, components)
    if warnings:
        report = replace(report, warnings=[*warnings, *report.warnings])
    return report, family, analysis.base_family
