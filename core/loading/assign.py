"""Putting file tensors into modules built on the meta device.

A network is built on ``meta`` (no memory, no random init), its expected layout is compared with
the file's, then each tensor is assigned one at a time: a memory-mapped view goes in as-is when
dtype and device already match (zero copies), otherwise it is converted once. Progress is
reported per tensor and the interrupt check runs between tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.errors import InterruptedByUser, ModelMismatchError
from core.quant.tensor import logical_shape


@dataclass(frozen=True)
class KeyReport:
    """How a file's keys compare with what an architecture expects."""

    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    shape_mismatches: tuple[str, ...]  # "key: file (a, b) vs model (c, d)"
    ignored: tuple[str, ...] = ()  # known harmless extras, by name

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.shape_mismatches)

    def to_json(self) -> dict[str, Any]:
        return {
            "missing": list(self.missing),
            "unexpected": list(self.unexpected),
            "shape_mismatches": list(self.shape_mismatches),
        }


@dataclass(frozen=True)
class LoadProgress:
    component: str
    tensors_done: int
    tensors_total: int
    bytes_done: int
    bytes_total: int


def expected_layout(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Key -> shape of every parameter and persistent buffer (works on the meta device)."""
    return {k: tuple(v.shape) for k, v in module.state_dict(keep_vars=True).items()}


def compare_layout(
    expected: Mapping[str, tuple[int, ...]],
    found: Mapping[str, tuple[int, ...]],
    *,
    harmless: Collection[str] = (),
    optional: Collection[str] = (),
) -> KeyReport:
    """``harmless``: extra keys known to be safe to ignore (listed by name, e.g. CLIP
    ``position_ids``). ``optional``: expected keys a file may lack (e.g. a tied embedding)."""
    missing = tuple(k for k in expected if k not in found and k not in optional)
    extra = [k for k in found if k not in expected]
    ignored = tuple(k for k in extra if k in harmless)
    unexpected = tuple(k for k in extra if k not in harmless)
    mismatches = tuple(
        f"{k}: file {tuple(found[k])} vs model {tuple(shape)}"
        for k, shape in expected.items()
        if k in found and tuple(found[k]) != tuple(shape)
    )
    return KeyReport(missing, unexpected, mismatches, ignored)


def _owners(module: nn.Module) -> dict[str, tuple[nn.Module, str, bool]]:
    """State-dict key -> (owning module, attribute name, is a parameter)."""
    out: dict[str, tuple[nn.Module, str, bool]] = {}
    for name, mod in module.named_modules():
        prefix = f"{name}." if name else ""
        for leaf in mod._parameters:
            out[prefix + leaf] = (mod, leaf, True)
        for leaf in mod._buffers:
            out[prefix + leaf] = (mod, leaf, False)
    return out


def assign_weights(
    module: nn.Module,
    get_tensor: Callable[[str], torch.Tensor],
    keys: Mapping[str, str],
    *,
    component: str,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    check: Callable[[], None] | None = None,
    progress: Callable[[LoadProgress], None] | None = None,
) -> None:
    """Fill ``module`` (built on meta) from the file.

    ``keys`` maps module key -> file key. ``dtype``: convert floating tensors to it (None keeps
    the file's). ``check`` runs between tensors and raises to stop (interrupt).
    """
    layout = module.state_dict(keep_vars=True)
    owners = _owners(module)  # one walk of the module tree instead of a lookup per tensor
    missing = [k for k in layout if k not in keys]
    if missing:
        raise ModelMismatchError(
            f"{component}: {len(missing)} weights are missing from the file, e.g. {missing[0]}",
            why="the file does not hold this architecture completely",
            fix="Run `loadout check` on the file to see every difference",
            code="missing_weights",
        )
    total_bytes = sum(v.numel() * v.element_size() for v in layout.values())
    done_bytes = 0
    target = torch.device(device)
    for i, (mkey, fkey) in enumerate(keys.items()):
        if check is not None:
            check()
        t = get_tensor(fkey)
        want = layout[mkey]
        if logical_shape(t) != tuple(want.shape):
            raise ModelMismatchError(
                f"{component}: weight {fkey} has shape {logical_shape(t)}, the architecture needs "
                f"{tuple(want.shape)}",
                why="the file was edited or belongs to a different model size",
                fix="Run `loadout check` on the file to see every difference",
                code="shape_mismatch",
            )
        # a quantized weight (uint8 blocks) stays quantized: the op layers dequantize it per forward
        to_dtype = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
        if t.dtype != to_dtype or t.device != target:
            t = t.to(device=target, dtype=to_dtype)
        owner, leaf, is_param = owners[mkey]
        if is_param:
            owner._parameters[leaf] = nn.Parameter(t, requires_grad=False)
        else:
            owner._buffers[leaf] = t
        done_bytes += t.numel() * t.element_size()
        if progress is not None:
            progress(LoadProgress(component, i + 1, len(keys), done_bytes, total_bytes))


def interrupt_check(flag: Callable[[], bool]) -> Callable[[], None]:
    """A ``check`` callable raising :class:`InterruptedByUser` when ``flag()`` is true."""

    def check() -> None:
        if flag():
            raise InterruptedByUser(
                "loading was stopped", why="you pressed stop", fix="Load the model again when ready"
            )

    return check
