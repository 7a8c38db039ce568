"""Key maps as data: how a file layout's tensors make a network's own (original-layout) tensors.

A :class:`KeyMapping` row says ``original`` is made of the ``diffusers`` (or other layout's) tensors
concatenated along dim 0, in order; with ``swap_halves`` the two halves of the result trade places
(the final adaLN layers store [shift, scale] in the originals and [scale, shift] in diffusers). A
map works on tensors and on shapes alike, so a file can be checked against an architecture from its
header alone. The row builders here (:func:`linear`, :func:`same`, :func:`qkv` ...) are what each
architecture package writes its maps with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from core.errors import ModelMismatchError

T = TypeVar("T")


@dataclass(frozen=True)
class KeyMapping:
    """``original`` is made of the ``diffusers`` tensors concatenated along dim 0, in order; with
    ``swap_halves`` the two halves of the result trade places."""

    original: str
    diffusers: tuple[str, ...]
    swap_halves: bool = False


def linear(original: str, *diffusers: str, bias: bool = True, swap: bool = False) -> list[KeyMapping]:
    rows = [KeyMapping(f"{original}.weight", tuple(f"{d}.weight" for d in diffusers), swap)]
    if bias:
        rows.append(KeyMapping(f"{original}.bias", tuple(f"{d}.bias" for d in diffusers), swap))
    return rows


def same(original: str, diffusers: str) -> KeyMapping:
    return KeyMapping(original, (diffusers,))


def qkv(prefix: str) -> tuple[str, str, str]:
    return (f"{prefix}.to_q", f"{prefix}.to_k", f"{prefix}.to_v")


def added_qkv(prefix: str) -> tuple[str, str, str]:
    return (f"{prefix}.add_q_proj", f"{prefix}.add_k_proj", f"{prefix}.add_v_proj")


def mlp(original: str, diffusers: str, fc: tuple[str, str]) -> list[KeyMapping]:
    return linear(f"{original}.{fc[0]}", f"{diffusers}.net.0.proj") + linear(
        f"{original}.{fc[1]}", f"{diffusers}.net.2"
    )


def _apply(
    source: Mapping[str, T],
    mappings: Sequence[KeyMapping],
    merge: Callable[[KeyMapping, list[T]], T],
    model: str,
) -> dict[str, T]:
    missing = [k for m in mappings for k in m.diffusers if k not in source]
    used = {k for m in mappings for k in m.diffusers}
    unmapped = sorted(k for k in source if k not in used)
    if missing or unmapped:
        parts = []
        if unmapped:
            parts.append(f"{len(unmapped)} unmapped diffusers keys: {_preview(unmapped)}")
        if missing:
            parts.append(f"{len(missing)} expected keys absent: {_preview(missing)}")
        raise ModelMismatchError(
            f"These diffusers tensors do not match a {model} with this config",
            why="; ".join(parts),
            fix="check the model family and its config (depth, guidance, qk-norm, dual attention)",
        )
    return {m.original: merge(m, [source[k] for k in m.diffusers]) for m in mappings}


def _preview(keys: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def merge_tensors(m: KeyMapping, parts: list[torch.Tensor]) -> torch.Tensor:
    """One row's tensor from its parts (concatenated along dim 0, halves swapped when asked)."""
    t = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    if m.swap_halves:
        first, second = t.chunk(2, dim=0)
        t = torch.cat((second, first), dim=0)
    return t


def _merge_shapes(m: KeyMapping, parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    rest = {p[1:] for p in parts}
    if len(rest) != 1:
        raise ModelMismatchError(
            f"Cannot fuse {', '.join(m.diffusers)} into {m.original}",
            why=f"their shapes {parts} differ beyond the first dimension",
            fix="the file is damaged or of another architecture",
        )
    return (sum(p[0] for p in parts), *parts[0][1:])


def convert_state_dict(
    state_dict: Mapping[str, torch.Tensor], mappings: Sequence[KeyMapping], *, model: str = "model"
) -> dict[str, torch.Tensor]:
    """Apply a key map to tensors; raises ModelMismatchError listing unmapped and absent keys."""
    return _apply(state_dict, mappings, merge_tensors, model)


def convert_shapes(
    shapes: Mapping[str, Sequence[int]], mappings: Sequence[KeyMapping], *, model: str = "model"
) -> dict[str, tuple[int, ...]]:
    """Apply a key map to a header's shapes: the original-layout shapes the tensors would have."""
    return _apply({k: tuple(int(d) for d in v) for k, v in shapes.items()}, mappings, _merge_shapes, model)
