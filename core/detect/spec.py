"""What a diffusion family needs to generate, as plain data on its :class:`~core.detect.registry.Family`
record: how prompts are encoded, the latent format, the model sampling and its shift, the network's
calling convention, the usual settings, the VAE it ships with and its activation-memory profile.

This module is pure Python (no torch): ``core.detect`` stays a leaf the heavy layers read. Where a
fact needs code, the spec holds an *id* and the code lives in an architecture package: the network
(``network``), the prompt encoding (``text``) and the VAE's codec (``codec``) are resolved by the
registries of ``core.archs.catalog``; the schedule by ``core.sampling.model_sampling``. A new family
that reuses parts is one record; one with a new network adds a package (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from torch import Tensor

#: A diffusion network's id in ``core.archs.catalog.NETS`` ("unet", "flux", ...).
NetworkId = str
#: A prompt encoding's id in ``core.archs.catalog.TEXTS`` ("sd1", "pixart_t5", ...).
TextConventionId = str
#: A latent codec's id in ``core.archs.catalog.CODECS`` ("kl-vae").
CodecId = str
#: A reference-picture convention's id in ``core.archs.catalog.REFERENCES`` ("kontext", "flux2").
ReferenceId = str
#: The noise schedule (``core.sampling.model_sampling`` resolves the name).
Schedule = Literal["discrete", "flow", "flux"]
#: A discrete schedule's betas, in diffusers' words: "scaled_linear" (SD: linear in sqrt(beta); ComfyUI
#: calls it "linear") or "linear" (PixArt: linear in beta; ComfyUI calls it "sqrt_linear").
BetaSchedule = Literal["scaled_linear", "linear"]


@dataclass(frozen=True)
class LatentFormat:
    """How a family scales the VAE's posterior mean into its latent space (ComfyUI's
    ``comfy/latent_formats.py``): ``process_in`` maps a VAE latent into the model's space
    (``(z - shift) * scale``, or per channel ``(z - mean) * scale / std`` where the format has a
    mean and std per channel: Wan's, Qwen-Image's), ``process_out`` maps back.

    ``channels``: 4, 16, 32, 48 ... ``frames``: whether latents carry a time axis
    (``[B, C, T, h, w]``: video VAEs, Qwen-Image's 3D VAE with T = 1). ``downscale``: pixels per
    latent along each side. ``patch``: pixels of latent packed into one channel group by the codec
    (FLUX.2's 2x2 packing: the sampler sees ``channels`` after packing)."""

    name: str
    channels: int
    scale: float
    shift: float = 0.0
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    frames: bool = False
    downscale: int = 8
    patch: int = 1

    def __post_init__(self) -> None:
        for name, values in (("mean", self.mean), ("std", self.std)):
            if values is not None and len(values) != self.channels:
                raise ValueError(f"{self.name}: {len(values)} {name} values for {self.channels} channels")
        if (self.mean is None) != (self.std is None):
            raise ValueError(f"{self.name}: a per-channel mean needs a per-channel std, and back")

    def _per_channel(self, values: tuple[float, ...], like: Tensor) -> Tensor:
        import torch

        shape = (1, self.channels) + (1,) * (like.ndim - 2)
        return torch.tensor(values, dtype=like.dtype, device=like.device).reshape(shape)

    def process_in(self, latent: Tensor) -> Tensor:
        if self.mean is not None and self.std is not None:
            mean, std = self._per_channel(self.mean, latent), self._per_channel(self.std, latent)
            return (latent - mean) * self.scale / std
        return (latent - self.shift) * self.scale

    def process_out(self, latent: Tensor) -> Tensor:
        if self.mean is not None and self.std is not None:
            mean, std = self._per_channel(self.mean, latent), self._per_channel(self.std, latent)
            return latent * std / self.scale + mean
        return latent / self.scale + self.shift


SD1_LATENT = LatentFormat("sd1", 4, 0.18215)
SDXL_LATENT = LatentFormat("sdxl", 4, 0.13025)
SD3_LATENT = LatentFormat("sd3", 16, 1.5305, 0.0609)
FLUX_LATENT = LatentFormat("flux", 16, 0.3611, 0.1159)
#: Wan 2.1's VAE (also Qwen-Image's and Anima's): ComfyUI's ``latent_formats.Wan21`` and the
#: ``latents_mean`` / ``latents_std`` of diffusers' ``AutoencoderKLWan`` / ``AutoencoderKLQwenImage``.
#: Pictures stay 4-D here (``[B, 16, h, w]``); ComfyUI's ``[B, 16, 1, h, w]`` holds the same values in
#: the same order (its noise is the same ``randn`` stream), so ``frames`` is off.
WAN21_LATENT = LatentFormat(
    "wan21",
    16,
    1.0,
    mean=(-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
          0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921),
    std=(2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
         3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160),
)  # fmt: skip

#: FLUX.2: the VAE's 32 channels packed 2x2 into 128 and normalised by the VAE's own batch-norm
#: statistics (ComfyUI's ``latent_formats.Flux2``: no scale or shift of its own)
FLUX2_LATENT = LatentFormat("flux2", 128, 1.0, downscale=16, patch=2)

#: Latent format name (``Family.latent_format``) -> the format (read-only).
LATENT_FORMATS = MappingProxyType(
    {f.name: f for f in (SD1_LATENT, SDXL_LATENT, SD3_LATENT, FLUX_LATENT, FLUX2_LATENT, WAN21_LATENT)}
)


@dataclass(frozen=True, kw_only=True)
class SamplingSpec:
    """ComfyUI's model sampling for the family: a discrete DDPM table (eps, or v where the file or
    the user says so) with its betas, or a flow schedule with its shift and timestep multiplier."""

    schedule: Schedule
    shift: float = 1.0
    multiplier: float = 1000.0
    beta_schedule: BetaSchedule = "scaled_linear"  # discrete only; SD's table by default
    beta_start: float = 0.00085
    beta_end: float = 0.012


SD1_SIZES = ((512, 512), (512, 768), (768, 512), (640, 640), (448, 640))
SD2_SIZES = ((768, 768), (512, 512), (640, 896), (896, 640))
XL_SIZES = ((1024, 1024), (832, 1216), (1216, 832), (896, 1152), (1152, 896), (768, 1344), (1344, 768))


@dataclass(frozen=True, kw_only=True)
class GenerationDefaults:
    """The settings a family is usually run at (what the Generate panel starts from and what a
    request without a CFG gets)."""

    cfg: float = 7.0
    steps: int | None = None  # the family's usual step count; None: no preference (keep the user's)
    scheduler: str | None = None  # the family's usual scheduler; None: no preference
    guidance: float | None = None  # distilled guidance the user may set (Flux dev); None: none shown
    sampler: str | None = None  # the family's usual sampler (ComfyUI's name); None: no preference
    sizes: tuple[tuple[int, int], ...] = SD1_SIZES  # trained resolutions, the usual one first
    #: the guidance patches (core.guidance names, at their defaults) its ComfyUI templates put on
    #: the model: on unless the user switches them off
    patches: tuple[str, ...] = ()


#: What the panel offers before a model is loaded, and for a family with no spec (it cannot generate).
NO_MODEL_DEFAULTS = GenerationDefaults()
UNKNOWN_FAMILY_DEFAULTS = GenerationDefaults(sizes=XL_SIZES)


@dataclass(frozen=True, kw_only=True)
class DiffusionSpec:
    """Everything generation and memory planning read about a diffusion family."""

    network: NetworkId | None  # None: the network is not implemented yet (no generation)
    sampling: SamplingSpec
    #: prompt encoding; None: Loadout cannot encode this family's prompts yet (no generation)
    text: TextConventionId | None
    codec: CodecId = "kl-vae"  # how its VAE turns pixels into latents and back
    text_encoders: tuple[str, ...] = ()  # encoder family ids the prompt encoding takes
    vae: str = "vae-sd"  # the VAE family it ships with (decides between same-shaped VAEs)
    defaults: GenerationDefaults = field(default_factory=GenerationDefaults)
    memory_profile: str | None = None  # core.memory.inference profile; None: the fallback bound
    preview_decoder: str | None = None  # TAESD decoder file stem, where one exists
    #: the network's block table (``core.archs.catalog.BLOCKS``): per-block merge ratios and LoRA
    #: block weights; None: merged as one block
    blocks: str | None = None
    #: how it takes reference pictures (editing: FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit); None: none
    references: ReferenceId | None = None

    @property
    def needs_t5(self) -> bool:
        return any(e.startswith("t5-") for e in self.text_encoders)
