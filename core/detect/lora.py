"""Adapter files (LoRA, LoCon, LoHa, LoKr, DoRA, GLoRA, OFT, full diffs) from the header alone.

``analyze_lora(view)`` groups the keys into modules, reads each module's algorithm and rank from
its shapes, says which naming scheme the file follows and which base family it was trained on,
and keeps one :class:`LoraModule` record per module so patching can map them onto model keys
without reading the file again. It returns None when the keys are not an adapter file.

Metadata (``ss_base_model_version``, ``modelspec.architecture``) is never required: when given
it confirms the shapes' verdict, breaks ties the shapes cannot break (Flux dev vs schnell), or is
reported as disagreeing. Only when nothing in the shapes points anywhere does it decide alone,
and ``base_evidence`` says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from core.detect.keyview import KeyView
from core.detect.lora_alpha import trained_scales
from core.detect.lora_base import FLUX_LINE, BaseGuess, encoder_id, encoder_widths, guess_base
from core.detect.lora_flux_control import NOTE as CONTROL_NOTE
from core.detect.lora_flux_control import control_inputs, control_overrides
from core.detect.lora_keys import KeyPart, naming_scheme, split_key
from core.detect.lora_modules import LoraModule, describe
from core.detect.metadata import family_hints
from core.detect.types import LoraSummary

__all__ = ["LoraAnalysis", "LoraModule", "analyze_lora"]

#: Below this share of keys in adapter modules, a file is not an adapter (a checkpoint, say).
_MIN_ADAPTER_SHARE = 0.5

_ORIGINAL_HEADS = {
    "input_blocks",
    "middle_block",
    "output_blocks",
    "double_blocks",
    "single_blocks",
    "joint_blocks",
    "blocks",
    "double_layers",
    "single_layers",
}
_DIFFUSERS_HEADS = {
    "down_blocks",
    "up_blocks",
    "mid_block",
    "transformer_blocks",
    "single_transformer_blocks",
    "joint_transformer_blocks",
}


@dataclass(frozen=True)
class LoraAnalysis:
    summary: LoraSummary
    base_family: str | None
    base_evidence: str  # a sentence: what decided the base family
    modules: tuple[LoraModule, ...]  # sorted by name
    layout: str | None  # naming of the diffusion-model paths: "original" | "diffusers" | None
    warnings: tuple[str, ...]
    #: a FLUX.1 control LoRA's img_in width (128), None for any other LoRA (FLUX.2's img_in is 128
    #: wide as it is: its LoRAs widen nothing)
    control_inputs: int | None = None
    #: a LoRA that takes a control picture as a reference latent (DiffSynth's Qwen-Image In-Context
    #: Control Union: told by its file name, :mod:`core.detect.lora_qwen_control`)
    control_reference: bool = False


def _group(
    view: KeyView, overrides: Mapping[str, KeyPart]
) -> tuple[dict[str, dict[str, str]], dict[str, set[str]], list[str]]:
    """module name -> {part: key}, module name -> factor spellings, keys that are no adapter part
    (``overrides``: keys a family's rule reads otherwise: a FLUX.1 control LoRA's)."""
    groups: dict[str, dict[str, str]] = {}
    spellings: dict[str, set[str]] = {}
    stray: list[str] = []
    for key in view:
        kp = overrides.get(key) or split_key(key)
        if kp is None:
            stray.append(key)
            continue
        parts = groups.setdefault(kp.module, {})
        if kp.part in parts:
            stray.append(key)  # a second spelling of the same part: keep the first
            continue
        parts[kp.part] = key
        if kp.spelling is not None:
            spellings.setdefault(kp.module, set()).add(kp.spelling)
    return groups, spellings, stray


def _build(
    view: KeyView, groups: dict[str, dict[str, str]], spellings: dict[str, set[str]]
) -> tuple[list[LoraModule], list[str], list[str]]:
    """Module records, keys left over, and 'name: problem' for incomplete modules."""
    modules: list[LoraModule] = []
    left: list[str] = []
    incomplete: list[str] = []
    for name, parts in groups.items():
        infos = {part: view[key] for part, key in parts.items()}
        shape = describe(infos)
        if shape is None:
            left.extend(parts.values())
            continue
        if shape.algorithm is None:
            incomplete.append(f"{name}: {shape.problem}")
            left.extend(parts.values())
            continue
        scheme = naming_scheme(name, frozenset(spellings.get(name, ())))
        modules.append(
            LoraModule(
                name=name,
                path=scheme.path,
                role=scheme.role,
                encoder=scheme.encoder,
                encoder_id=scheme.encoder_id,
                format=scheme.format,
                algorithm=shape.algorithm,
                rank=shape.rank,
                has_alpha="alpha" in parts,
                has_dora_scale="dora_scale" in parts,
                out_features=shape.out_features,
                in_features=shape.in_features,
                conv=shape.conv,
                kernel=shape.kernel,
                keys=tuple(sorted(parts.items())),
            )
        )
    modules.sort(key=lambda m: m.name)
    return modules, left, incomplete


def _most_common_rank(modules: Iterable[LoraModule]) -> int | None:
    ranks = Counter(m.rank for m in modules if m.rank is not None)
    if not ranks:
        return None
    return max(ranks, key=lambda r: (ranks[r], r))


def _format(modules: list[LoraModule], warnings: list[str]) -> str:
    formats = Counter(m.format for m in modules)
    if len(formats) == 1:
        return next(iter(formats))
    detail = ", ".join(f"{n} {fmt}" for fmt, n in formats.most_common())
    warnings.append(f"the file mixes naming schemes ({detail} modules)")
    return "mixed"


def _layout(modules: Iterable[LoraModule]) -> str | None:
    heads = Counter(m.path.split(".", 1)[0] for m in modules if m.role == "diffusion_model")
    original = sum(n for h, n in heads.items() if h in _ORIGINAL_HEADS)
    diffusers = sum(n for h, n in heads.items() if h in _DIFFUSERS_HEADS)
    if not original and not diffusers:
        return None
    return "original" if original >= diffusers else "diffusers"


def _same_line(a: str, b: str) -> bool:
    def line(f: str) -> str:
        return "flux" if f in FLUX_LINE or f == "flux-fill" else f.split("-")[0].split(".")[0]

    return line(a) == line(b)


def _with_metadata(guess: BaseGuess, metadata: Mapping[str, str] | None) -> tuple[str | None, str, list[str]]:
    """(family, evidence, warnings) after metadata confirms, breaks a tie, or disagrees."""
    warnings = list(guess.warnings)
    hint = next((h for h in family_hints(None, metadata or {}) if h.family is not None), None)
    tie = [guess.tie] if guess.tie else []
    if hint is None or hint.family is None:
        return guess.family, guess.evidence, warnings + tie
    said = hint.text
    if guess.family is None:
        warnings.append(f"the base family comes from metadata alone ({said})")
        return hint.family, f"{guess.evidence}; metadata says {hint.family} ({said})", warnings
    if hint.exact and hint.family == guess.family:
        return guess.family, f"{guess.evidence}; metadata agrees ({said})", warnings
    if hint.exact and hint.family in guess.alternatives:
        alts = " / ".join(guess.alternatives)
        return hint.family, f"{guess.evidence}; the shapes fit {alts}, metadata picks it ({said})", warnings
    if _same_line(hint.family, guess.family):
        return guess.family, f"{guess.evidence}; metadata names the same line ({said})", warnings + tie
    warnings.append(
        f"metadata says {hint.family} ({said}) but the key names and shapes say {guess.family}; "
        "going by the shapes"
    )
    return guess.family, guess.evidence, warnings + tie


def _with_encoder_ids(modules: list[LoraModule], family: str | None) -> list[LoraModule]:
    widths = encoder_widths(modules)
    out: list[LoraModule] = []
    for m in modules:
        if m.role == "text_encoder":
            width = widths.get((m.format, m.encoder, m.encoder_id))
            te_id = encoder_id(m, width, family)
            if te_id != m.encoder_id:
                m = replace(m, encoder_id=te_id)
        out.append(m)
    return out


def _leftover_warnings(stray: list[str], incomplete: list[str]) -> list[str]:
    warnings: list[str] = []
    if incomplete:
        warnings.append(f"{len(incomplete)} modules are incomplete and were skipped ({incomplete[0]})")
    if stray:
        warnings.append(f"{len(stray)} keys are not adapter weights and were ignored (first: {stray[0]!r})")
    return warnings


#: Any of these in a key name (suffixes end at the newline) means the file may be an adapter;
#: without one it cannot be. Plain substring tests run at C speed over all keys joined.
_ADAPTER_MARKS = (
    "lora", "hada_", "lokr_", "oft_", "dora_scale", "lycoris", ".alpha\n", ".diff\n", ".diff_b\n",
    ".set_weight\n", ".reshape_weight\n", ".on_input\n", ".a1.weight\n", ".a2.weight\n",
    ".b1.weight\n", ".b2.weight\n", ".rescale\n", ".w_norm\n", ".b_norm\n",
)  # fmt: skip


def analyze_lora(view: KeyView, metadata: Mapping[str, str] | None = None) -> LoraAnalysis | None:
    """What the adapter file behind ``view`` is, or None when its keys are not an adapter's."""
    joined = "\n".join(view) + "\n"
    if not any(mark in joined for mark in _ADAPTER_MARKS):
        return None  # fast path: no key names an adapter factor (checkpoints, VAEs, encoders)
    keys = list(view)
    widths = {k: view[k].shape[1] for k in keys if k.endswith(".lora_A.weight") and view[k].ndim == 2}
    groups, spellings, stray = _group(view, control_overrides(keys, widths))
    modules, left, incomplete = _build(view, groups, spellings)
    adapter_keys = sum(len(m.keys) for m in modules)
    if not modules or adapter_keys < _MIN_ADAPTER_SHARE * len(view):
        return None
    warnings = _leftover_warnings(stray + left, incomplete)
    family, evidence, base_warnings = _with_metadata(guess_base(modules), metadata)
    control = control_inputs(modules) if family is None or family in FLUX_LINE else None
    if control is not None:
        warnings.append(CONTROL_NOTE)
    fmt = _format(modules, warnings)
    warnings.extend(base_warnings)
    modules = _with_encoder_ids(modules, family)
    algorithms: set[str] = set()
    for m in modules:
        algorithms |= m.algorithms
    summary = LoraSummary(
        format=fmt,
        algorithms=tuple(sorted(algorithms)),
        rank=_most_common_rank(modules),
        modules=len(modules),
        targets={
            "diffusion_model": sum(m.role == "diffusion_model" for m in modules),
            "text_encoder": sum(m.role == "text_encoder" for m in modules),
        },
        trained_scale=trained_scales(metadata, modules),
        control="input" if control is not None else None,
    )
    return LoraAnalysis(
        summary, family, evidence, tuple(modules), _layout(modules), tuple(warnings), control
    )
