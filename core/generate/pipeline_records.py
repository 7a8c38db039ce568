"""The records a :class:`~core.generate.pipeline.Pipeline` runs with: the loaded networks of one
generation, where and in what precision each phase computes, the hooks a session answers (placing
models, stopping, progress, the conditioning cache's encoder state) and the phases' timings."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from core.generate.clip_hooks import ClipHooks
from core.generate.events import GenerateProgress, Phase
from core.generate.preview import Previewer
from core.memory.peak import median_step_seconds
from core.text.conditioning import TextEncoders


@dataclass
class Networks:
    """The loaded networks of one generation (modules as the memory manager placed them)."""

    family: str
    diffusion: nn.Module
    text: TextEncoders
    vae: nn.Module  # a module of the family's latent codec (an AutoencoderKL for the KL-VAE)
    v_prediction: bool = False
    zero_terminal_snr: bool = False  # the ztsnr noise table (with v-prediction)


@dataclass(frozen=True)
class Compute:
    """Where and in what precision each phase computes (the dtype policy's choices)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    diffusion_dtype: torch.dtype = torch.float32
    text_dtype: torch.dtype = torch.float32  # ComfyUI encodes prompts in float32
    vae_dtype: torch.dtype = torch.float32


def _no_phase(phase: Phase) -> None:
    return None


def _no_check() -> None:
    return None


def _no_progress(p: GenerateProgress) -> None:
    return None


@dataclass
class Hooks:
    place: Callable[[Phase], None] = _no_phase
    check: Callable[[], None] = _no_check
    progress: Callable[[GenerateProgress], None] = _no_progress
    #: identity of the text encoders and their LoRA clip strengths (the conditioning cache key)
    text_key: Hashable = None
    #: the text-encoder patches each prompt carries (a LoRA on one prompt only); None: the stack's
    #: for every prompt, keyed by ``text_key``
    clip_hooks: ClipHooks | None = None
    #: bytes free on the device for the VAE's activations (None: unknown, decode whole)
    free_bytes: Callable[[], int | None] = lambda: None
    preview: Previewer | None = None
    image: int = 0  # which picture of a sweep, for progress
    images: int = 1
    #: the hires fix's upscale model: [B, 3, H, W] in [0, 1] -> the larger picture (None: no model)
    upscale: Callable[[Tensor], Tensor] | None = None


@dataclass
class Timings:
    text_encode: float = 0.0
    sample: float = 0.0
    decode: float = 0.0
    upscale: float = 0.0  # the hires fix's upscale (latent, or decode + model + encode)
    steps: list[float] = field(default_factory=list)
    tiled_decode: bool = False

    @property
    def seconds_per_step(self) -> float:
        return median_step_seconds(self.steps)

    def as_dict(self) -> dict[str, float]:
        out = {"text_encode": self.text_encode, "sample": self.sample, "decode": self.decode}
        return out | ({"upscale": self.upscale} if self.upscale else {})


__all__ = ["Compute", "Hooks", "Networks", "Timings"]
