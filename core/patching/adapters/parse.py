"""From the tensors of one module of an adapter file to an ``Adapter``.

The caller groups a file's tensors by module and strips the module path, leaving the factor
suffixes (``lora_up.weight``, ``hada_w1_a``, ``alpha``...). Suffixes map onto canonical part names
through one table; the registered classes then claim the module by its parts, and exactly one
must. Unknown suffixes are refused rather than silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from torch import Tensor

from core.patching.adapters.base import Adapter, DoraAxis
from core.patching.adapters.catalog import registry
from core.patching.adapters.errors import AdapterFormatError, bad_factors, check_finite_scalar, module_label
from core.patching.adapters.full import DiffAdapter

_SAME = (
    *("up", "down", "mid"),
    *("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2"),
    *("lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2"),
    *("a1", "a2", "b1", "b2"),
    *("oft_blocks", "rescale", "diff", "diff_b", "set_weight", "alpha", "dora_scale"),
)

#: File suffix -> canonical part (a leading "." or "_" is ignored: ``_lora.up.weight``).
PART_NAMES: Mapping[str, str] = MappingProxyType(
    {
        **{name: name for name in _SAME},
        **{f"{name}.weight": name for name in ("a1", "a2", "b1", "b2")},
        "lora_up.weight": "up",
        "lora_down.weight": "down",
        "lora_mid.weight": "mid",
        "lora_B.weight": "up",
        "lora_A.weight": "down",
        "lora.up.weight": "up",
        "lora.down.weight": "down",
        "lora_linear_layer.up.weight": "up",
        "lora_linear_layer.down.weight": "down",
        "lora_magnitude_vector": "dora_scale",
        "lora_magnitude_vector.weight": "dora_scale",
    }
)

#: Suffixes whose DoRA magnitude is per output channel whatever its shape (PEFT's conv (1, out, 1, 1)).
_PEFT_MAGNITUDE = frozenset({"lora_magnitude_vector", "lora_magnitude_vector.weight"})


def canonical_part(suffix: str) -> str | None:
    """The canonical part name of a factor suffix, None when it is not an adapter part."""
    return PART_NAMES.get(suffix.lstrip("._"))


@dataclass(frozen=True)
class ModuleAdapters:
    """What one module of a file patches: its weight, its bias (``diff_b``), or both."""

    weight: Adapter | None
    bias: Adapter | None


def canonical_parts(factors: Mapping[str, Tensor], module: str = "") -> dict[str, Tensor]:
    parts: dict[str, Tensor] = {}
    unknown: list[str] = []
    for suffix, tensor in factors.items():
        part = canonical_part(suffix)
        if part is None:
            unknown.append(suffix)
        elif part in parts:
            raise bad_factors(module, f"it has two tensors for the {part!r} part")
        else:
            parts[part] = tensor
    if unknown:
        raise AdapterFormatError(
            f"The {module_label(module)} has parts this program does not know: {', '.join(sorted(unknown))}",
            why="the adapter uses an algorithm or a naming that is not supported",
            fix="convert the adapter to LoRA, or leave this module out",
            code="unsupported_adapter",
        )
    return parts


def adapter_from_factors(
    factors: Mapping[str, Tensor],
    alpha: float | None = None,
    *,
    dora_scale: Tensor | None = None,
    dora_axis: DoraAxis | None = None,
    module: str = "",
) -> Adapter:
    """The weight adapter of one module from its factors keyed by suffix.

    ``alpha`` and ``dora_scale`` may come as arguments or among the factors (the arguments win).
    A ``diff_b`` among the factors is left for ``bias_adapter_from_factors``.
    """
    parts = canonical_parts(factors, module)
    alpha_tensor = parts.pop("alpha", None)
    if alpha is None and alpha_tensor is not None:
        alpha = _scalar(alpha_tensor, module)
    check_finite_scalar(module, "alpha", alpha)
    if dora_scale is None:
        dora_scale = parts.pop("dora_scale", None)
        if dora_axis is None and dora_scale is not None and _PEFT_MAGNITUDE & factors.keys():
            dora_axis = "out"
    parts.pop("dora_scale", None)
    parts.pop("diff_b", None)
    if not parts:
        raise bad_factors(module, "it has no factors for a weight")
    claimed = [cls for cls in registry if cls.claims(parts)]
    if len(claimed) != 1:
        found = ", ".join(sorted(parts))
        why = (
            "they match no known algorithm"
            if not claimed
            else "they mix " + " and ".join(c.name for c in claimed)
        )
        raise AdapterFormatError(
            f"The {module_label(module)} has parts {found}",
            why=why,
            fix="check that the file is an adapter this program supports",
            code="unsupported_adapter",
        )
    cls = claimed[0]
    extra = sorted(parts.keys() - cls.parts)
    if extra:
        raise bad_factors(module, f"a {cls.name} module does not use {', '.join(extra)}")
    return cls.from_parts(parts, alpha=alpha, dora_scale=dora_scale, dora_axis=dora_axis, module=module)


def bias_adapter_from_factors(factors: Mapping[str, Tensor], *, module: str = "") -> Adapter | None:
    """The bias patch of one module (``diff_b``), None when it has none."""
    diff_b = canonical_parts(factors, module).get("diff_b")
    return None if diff_b is None else DiffAdapter(diff_b, module=module)


def module_adapters(
    factors: Mapping[str, Tensor],
    alpha: float | None = None,
    *,
    dora_scale: Tensor | None = None,
    dora_axis: DoraAxis | None = None,
    module: str = "",
) -> ModuleAdapters:
    """Both patches of one module; a module with only ``diff_b`` patches only its bias."""
    parts = canonical_parts(factors, module)
    has_weight = bool(parts.keys() - {"alpha", "dora_scale", "diff_b"})
    weight = (
        adapter_from_factors(factors, alpha, dora_scale=dora_scale, dora_axis=dora_axis, module=module)
        if has_weight
        else None
    )
    return ModuleAdapters(weight, bias_adapter_from_factors(factors, module=module))


def _scalar(tensor: Tensor, module: str) -> float:
    if tensor.numel() != 1:
        raise bad_factors(module, f"its alpha has shape {list(tensor.shape)} instead of a single number")
    return float(tensor.reshape(()).item())
