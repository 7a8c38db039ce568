"""How a file's weights are stored, per component: the mix of types, bytes and bits per weight
(pure, from tensor infos alone; ``loadout inspect`` shows it for GGUF files)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: quant sits below files (files builds quantized weights)
    from core.files.tensor_info import TensorInfo


@dataclass(frozen=True)
class QuantSummary:
    #: (type, share of the weights' elements) by decreasing share, e.g. (("Q4_K", 0.9), ("F32", 0.1))
    mix: tuple[tuple[str, float], ...]
    nbytes: int
    numel: int

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / self.numel if self.numel else 0.0

    @property
    def text(self) -> str:
        """ "Q4_K (90 %), F32 (10 %)"; shares under 0.5 % are left out."""
        parts = [f"{name} ({share * 100:.0f} %)" for name, share in self.mix if share >= 0.005]
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "types": self.text,
            "bytes": self.nbytes,
            "bits_per_weight": round(self.bits_per_weight, 3),
        }


def summarize(tensors: Mapping[str, TensorInfo], prefix: str = "") -> QuantSummary:
    """The storage of the tensors under ``prefix``."""
    by_type: dict[str, int] = {}
    nbytes = numel = 0
    for key, info in tensors.items():
        if not key.startswith(prefix):
            continue
        n = info.numel
        by_type[info.dtype] = by_type.get(info.dtype, 0) + n
        numel += n
        nbytes += info.nbytes
    mix = tuple(sorted(((k, v / numel) for k, v in by_type.items()), key=lambda kv: -kv[1])) if numel else ()
    return QuantSummary(mix, nbytes, numel)
