"""The scale a LoRA was trained at when its alpha lives only in the file's metadata.

PEFT-family trainers (diffusers' training scripts, SimpleTuner) store no ``<module>.alpha``
tensors: rank and alpha are in the header metadata only. diffusers writes
``lora_adapter_metadata``, a JSON of the PEFT ``LoraConfig`` per component, its keys prefixed by
the component (``"transformer.r": 16``, ``"transformer.lora_alpha": 64``, ``"unet.…"``,
``"text_encoder.…"``), or unprefixed when one model saved its own adapter (``"r"``,
``"lora_alpha"``). diffusers applies ``alpha / r`` from it (``alpha / sqrt(r)`` with rsLoRA);
ComfyUI reads only ``.alpha`` tensors and applies such files at scale 1, and so does Loadout (the
same picture for the same settings). This module only *reads* the trained scale so the artist can
be told; nothing here changes what is applied.

Metadata is untrusted: broken JSON, non-numbers, booleans, zero or negative values, a rank the
shapes contradict are all ignored, never raised. Explicit ``.alpha`` tensors win: a component
whose modules carry them gets no record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from core.detect.lora_modules import LoraModule
from core.detect.types import TrainedScale

__all__ = ["ADAPTER_METADATA_KEY", "scale_metadata", "trained_scales"]

#: The header key diffusers writes the PEFT configs under (diffusers' ``LORA_ADAPTER_METADATA_KEY``).
ADAPTER_METADATA_KEY = "lora_adapter_metadata"
_ALPHA, _RANK = "lora_alpha", "r"
_FIELDS = (_ALPHA, _RANK, "use_rslora", "alpha_pattern", "rank_pattern")
#: Scales this close to 1 are 1 (alpha == r written as floats).
_TOLERANCE = 1e-6


def scale_metadata(metadata: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """The header entries this module reads, as a hashable key (for memos keyed by shapes)."""
    if not metadata:
        return ()
    return tuple(
        sorted((k, str(v)) for k, v in metadata.items() if k == ADAPTER_METADATA_KEY or _field(k)[1])
    )


def _field(key: str) -> tuple[str, str | None]:
    """("transformer", "lora_alpha") for "transformer.lora_alpha"; ("", "r") for "r"; else None."""
    component, _, name = key.rpartition(".")
    return (component, name) if name in _FIELDS else (component, None)


def _configs(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """component -> {field: value}: from diffusers' JSON, else from plain header keys."""
    source: Mapping[str, Any] = metadata
    raw = metadata.get(ADAPTER_METADATA_KEY)
    if raw is not None:
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except (ValueError, RecursionError):
            parsed = None
        source = parsed if isinstance(parsed, Mapping) else {}
    out: dict[str, dict[str, Any]] = {}
    for key, value in source.items():
        if not isinstance(key, str):
            continue
        component, name = _field(key)
        if name is not None:
            out.setdefault(component, {})[name] = value
    return out


def _number(value: Any) -> float | None:
    """A finite positive number from a JSON number or its text; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def _rank(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _scale(alpha: float, rank: int, rslora: bool) -> float:
    return alpha / math.sqrt(rank) if rslora else alpha / rank


def _varies(config: Mapping[str, Any], alpha: float, rank: int, rslora: bool) -> bool:
    """Whether ``alpha_pattern`` / ``rank_pattern`` give some modules another scale."""
    alphas, ranks = config.get("alpha_pattern"), config.get("rank_pattern")
    alphas = alphas if isinstance(alphas, Mapping) else {}
    ranks = ranks if isinstance(ranks, Mapping) else {}
    base = _scale(alpha, rank, rslora)
    for pattern in set(alphas) | set(ranks):
        a = _number(alphas.get(pattern, alpha))
        r = _rank(ranks.get(pattern, rank))
        if a is not None and r is not None and abs(_scale(a, r, rslora) - base) > _TOLERANCE:
            return True
    return False


def _modules_of(component: str, modules: Iterable[LoraModule]) -> list[LoraModule]:
    """The modules a component's config describes ("" names the whole file): diffusers' LoRA
    loaders name ``unet``, ``transformer`` and ``text_encoder``, ``text_encoder_2``, ..."""
    if not component:
        return list(modules)
    if component.startswith("text_encoder"):
        suffix = component.removeprefix("text_encoder").lstrip("_")
        index = int(suffix) if suffix.isdigit() else None
        return [m for m in modules if m.role == "text_encoder" and (index is None or m.encoder == index)]
    if component == "unet" or component.startswith("transformer"):
        return [m for m in modules if m.role == "diffusion_model"]
    return []  # a namespace no diffusers pipeline loads LoRA weights into


def _record(component: str, config: Mapping[str, Any], modules: list[LoraModule]) -> TrainedScale | None:
    alpha, rank = _number(config.get(_ALPHA)), _rank(config.get(_RANK))
    if alpha is None or rank is None or not modules or any(m.has_alpha for m in modules):
        return None
    patterned = bool(config.get("rank_pattern")) and isinstance(config.get("rank_pattern"), Mapping)
    if not patterned and not any(m.rank == rank for m in modules):
        return None  # the shapes say another rank: this config does not describe these weights
    rslora = _flag(config.get("use_rslora"))
    scale = _scale(alpha, rank, rslora)
    if abs(scale - 1.0) <= _TOLERANCE:
        return None
    return TrainedScale(
        component=component,
        alpha=alpha,
        rank=rank,
        scale=scale,
        rslora=rslora,
        varies=_varies(config, alpha, rank, rslora),
        dora=any(m.has_dora_scale for m in modules),
    )


def trained_scales(
    metadata: Mapping[str, Any] | None, modules: Iterable[LoraModule]
) -> tuple[TrainedScale, ...]:
    """Per component, the ``alpha / r`` its metadata says it was trained at, where that is not 1
    and no ``.alpha`` tensor says otherwise; sorted by component. Never raises."""
    if not metadata:
        return ()
    mods = list(modules)
    records = (_record(c, config, _modules_of(c, mods)) for c, config in _configs(metadata).items())
    return tuple(sorted((r for r in records if r is not None), key=lambda r: r.component))
