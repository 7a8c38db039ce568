"""An architecture's activation-memory model: the records its package fills and
:mod:`core.memory.inference` evaluates (the formula and the fitting are described there).

A step's activation peak (weights and inputs excluded) is
``bytes(dtype) * batch * (per_position * N + per_score * heads * T**2 + constant)``: N latent
positions, T tokens of the largest self-attention (see :class:`Profile`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

#: fitted on the CPU's flash kernel; CUDA's flash/efficient kernels keep the same tensors
FROM_CPU = "unmeasured here (no GPU): the CPU flash fit; CUDA flash/efficient keep the same tensors"
CPU_MEASURED = "ActivationTracker, torch 2.13 CPU, fp32, batch 1, one forward at {}"


@dataclass(frozen=True)
class Profile:
    """How a network family turns a workload into N and T."""

    name: str
    latent_stride: int  # pixels per position N (8: the VAE; 16: VAE and 2x2 patches)
    attention_stride: int  # pixels per token of the largest self-attention
    text_tokens: int  # tokens attended together with the image (joint attention), else 0
    heads: int  # heads of the largest self-attention
    native: int  # the family's usual square size, for estimates without a workload
    width: int  # the channel width the coefficients were measured at (UNet model_channels, hidden)

    def positions(self, width: int, height: int) -> int:
        return (width // self.latent_stride) * (height // self.latent_stride)

    def attention_tokens(self, width: int, height: int) -> int:
        return (width // self.attention_stride) * (height // self.attention_stride) + self.text_tokens


@dataclass(frozen=True)
class Coefficients:
    per_position: float  # bytes per element-byte per position
    constant: float
    per_score: float = 0.0
    measured: str = ""  # how and where, or "unmeasured: ..." when taken from a sibling kind
    #: (per_position, constant) of a second place the peak can be, for a network whose peak moves
    #: with the image size (PixArt's cross-attention below ~150 px); the larger of the two counts
    other_peak: tuple[float, float] | None = None

    def per_sample(self, positions: int) -> float:
        """The linear part (no score term): bytes per element-byte of one sample."""
        main = self.per_position * positions + self.constant
        if self.other_peak is None:
            return main
        return max(main, self.other_peak[0] * positions + self.other_peak[1])


@dataclass(frozen=True)
class MemoryModel:
    """A profile and its coefficients by attention kind (``cpu_flash``, ``cuda_flash``, ``math``)."""

    profile: Profile
    coefficients: Mapping[str, Coefficients]


def fitted_on_cpu(profile: Profile, cpu: Coefficients) -> MemoryModel:
    """A model measured with the CPU's flash kernel, used for CUDA's flash kernels too."""
    table = {"cpu_flash": cpu, "cuda_flash": replace(cpu, measured=FROM_CPU)}
    return MemoryModel(profile, MappingProxyType(table))
