"""The three things a family is made of, each a small typed protocol an architecture package
implements (docs/architecture.md, "Architecture packages"):

* :class:`DiffusionNet`: a diffusion network, built from the file's shapes; the key maps of every
  layout it ships in and the names adapter (LoRA) files give its weights; its forward pass in the
  one signature the sampler calls; stand-in inputs for the test run; its activation-memory models.
* :class:`TextConvention`: which text encoder towers a prompt goes through (by encoder family id),
  how their outputs combine into the network's context, pooled vector and text mask, and the extra
  inputs (size conditions, distilled guidance) the network takes beside them.
* :class:`LatentCodec`: pixels <-> latents (whole or tiled), the memory a decode needs, a cheap
  latent -> RGB preview, for one kind of VAE module.

A family record (``core.detect``'s ``DiffusionSpec``) names one of each by id; the registries in
:mod:`core.archs.catalog` resolve the ids. Implementations are stateless objects: every method
takes the loaded module it works on, so one object serves every loaded model of its kind.

This module and its records import torch types only; packages import the networks
(``core.models``) and never a layer above (sampling, text, generate, session, memory, patching,
loading): those layers read packages through the catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import MemoryModel
from core.archs.preview import LatentPreview
from core.models.patches import NetworkPatches

# -- DiffusionNet -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InpaintChannels:
    """An inpainting variant's extra input channels beside the latent (ComfyUI's ``c_concat``).

    ``mask_cell`` 0: the mask resized to the latent and rounded, one channel, before the masked
    picture's latent (ComfyUI's base model: the 9-channel UNets). ``mask_cell`` n: the mask at n
    times the latent's size, unrounded, each n x n cell of pixels packed into n * n channels, after
    the masked picture's latent (ComfyUI's Flux: FLUX.1 Fill, 16 + 64 channels)."""

    mask_cell: int = 0

    @property
    def mask_channels(self) -> int:
        return self.mask_cell * self.mask_cell if self.mask_cell else 1


@dataclass(frozen=True, kw_only=True)
class CallingConvention:
    """What callers know of a network's inputs besides the call itself (the test run builds
    stand-in inputs from it; the generic adapter packs by it)."""

    name: str
    packed: bool = False  # takes 2x2-patch tokens: its config counts the latent's channels x4
    text_tokens: int  # tokens its real text encoders produce (the test run's stand-in context)
    unit_timestep: float  # the timestep it takes at sigma 1: discrete index 999, flow x1000, Flux's sigma
    latent_stride: int = 8  # pixels per element of the latent it takes (FLUX.2's VAE: 16)
    references: bool = False  # takes reference latents (Conditioning.references: Kontext, FLUX.2, Qwen edit)
    #: how an inpainting variant's extra input channels are laid out (ComfyUI's ``concat_cond``)
    inpaint: InpaintChannels = InpaintChannels()


@dataclass(frozen=True)
class StandIn:
    """Seeded stand-ins for everything a network takes but the latent (the test run's inputs).

    ``state_channels``: the latent's channels; ``in_channels``: what the network's input has (more
    for inpaint/fill models: the extra channels get stand-ins of their own)."""

    state_channels: int
    in_channels: int
    context: Tensor | None
    pooled: Tensor | None = None
    guidance: Tensor | None = None
    mask: Tensor | None = None


class DiffusionNet(Protocol):
    """One diffusion network architecture (``DiffusionSpec.network`` names it by :attr:`id`)."""

    @property
    def id(self) -> str: ...

    @property
    def architecture(self) -> Architecture:
        """Config from the state dict's shapes, the build, and the key conversions of every file
        layout it ships in (original, diffusers, ...)."""
        ...

    @property
    def calling(self) -> CallingConvention: ...

    @property
    def memory(self) -> Mapping[str, MemoryModel]:
        """Its measured activation-memory models by profile name (a family record names one)."""
        ...

    def owns(self, module: nn.Module) -> bool:
        """Whether ``module`` (a loaded diffusion model) is this network."""
        ...

    def width(self, config: Any) -> int | None:
        """The channel width its memory models scale with (a test's tiny config is narrower)."""
        ...

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        """The other names adapter files give its weights (diffusers paths; fused weights as
        several parts in order), beyond the module's own keys."""
        ...

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        """The raw prediction for the latent ``x`` (``[B, C, h, w]``, the model's space, any extra
        input channels already appended) at timestep ``t`` (``[B]``), with this call's ``patches``
        (:mod:`core.models.patches`; a network refuses a patch it has no point for)."""
        ...

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        """Stand-ins drawn from ``generator`` in a fixed order (the test run's seed decides them)."""
        ...


# -- TextConvention -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipTowerSpec:
    """A CLIP tower: which output (``layer`` counts from the end; None: the last), whether the
    hidden states get the final norm, whether the pooled vector is projected, the pad token."""

    layer: int | None = None
    norm_hidden: bool = True
    projected_pooled: bool = False
    pad_with_end: bool = True
    kind: str = "clip"


@dataclass(frozen=True)
class T5TowerSpec:
    """A T5 tower: at least ``min_length`` tokens; ``empty_is_padding``: weights against an
    all-padding window (PixArt's)."""

    min_length: int = 1
    empty_is_padding: bool = False
    kind: str = "t5"


@dataclass(frozen=True)
class TowerSpec:
    """One encoder tower of a convention: the encoder family it takes (``clip-l``, ``t5-xxl``),
    the name its output has in :meth:`TextConvention.combine`, the encoder's title for a refusal,
    whether a prompt can be encoded without it, and how to run it (``options.kind`` picks the
    tower kind in ``core.text``)."""

    encoder: str
    name: str
    title: str
    options: ClipTowerSpec | T5TowerSpec | Any
    required: bool = True
    #: encoder families that may stand in for :attr:`encoder` (T5-XXL files named t5-base ...)
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class TowerOutput:
    """A tower's weighted output for one prompt: ``[1, tokens, width]`` hidden states, the pooled
    vector or None, the text mask or None (float32, CPU)."""

    hidden: Tensor
    pooled: Tensor | None
    mask: Tensor | None = None


@dataclass(frozen=True)
class TextOutput:
    """What a convention made of one prompt (the cached result; float32, CPU, batch 1)."""

    context: Tensor
    pooled: Tensor | None
    mask: Tensor | None = None


@dataclass(frozen=True)
class ExtraInputs:
    """What the network takes beside the text: the picture's size, whether this is the negative
    prompt, the distilled guidance the user set (None: none set), and the width of the network's
    pooled-vector input (its ``adm_in_channels``; None: it takes none)."""

    width: int
    height: int
    negative: bool = False
    guidance: float | None = None
    adm_channels: int | None = None


class TextConvention(Protocol):
    """How prompts become a network's conditioning (``DiffusionSpec.text`` names it by :attr:`id`)."""

    @property
    def id(self) -> str: ...

    @property
    def towers(self) -> tuple[TowerSpec, ...]: ...

    @property
    def guidance(self) -> float | None:
        """The distilled guidance the network takes when the user sets none (None: it takes none)."""
        ...

    @property
    def pictures(self) -> bool:
        """Whether its prompt encoding reads the reference pictures (Qwen-Image-Edit's vision
        tower): the prompt encoder then hands its towers the
        :class:`~core.archs.references.PromptPictures` of the generation."""
        ...

    def combine(self, outputs: Mapping[str, TowerOutput]) -> TextOutput:
        """The towers' outputs (by :attr:`TowerSpec.name`; a missing optional one is absent)
        combined into the convention's context, pooled vector and mask."""
        ...

    def network_inputs(self, text: TextOutput, extra: ExtraInputs) -> Conditioning:
        """The network's conditioning for one prompt (batch 1): the pooled vector with its size
        conditions, the distilled guidance, the mask."""
        ...


# -- LatentCodec --------------------------------------------------------------------------------

TileProgress = Callable[[int, int], None]


class LatentCodec(Protocol):
    """Pixels <-> latents for one kind of VAE module (``DiffusionSpec.codec`` names it by :attr:`id`).

    Pixels are ``[B, 3, H, W]`` in [-1, 1]; latents are the VAE's own space (the family's
    :class:`~core.detect.spec.LatentFormat` maps them into the model's): ``[B, C, h, w]``, or
    ``[B, C, T, h, w]`` for a video codec."""

    @property
    def id(self) -> str: ...

    @property
    def architecture(self) -> Architecture: ...

    def owns(self, module: nn.Module) -> bool: ...

    def downscale(self, module: nn.Module) -> int:
        """Pixels per latent along each side."""
        ...

    def channels(self, module: nn.Module) -> int: ...

    def encode(self, module: nn.Module, pixels: Tensor) -> Tensor:
        """The posterior mean (ComfyUI's VAEEncode), in the VAE's space."""
        ...

    def decode(self, module: nn.Module, latent: Tensor) -> Tensor: ...

    def decode_tiled(
        self, module: nn.Module, latent: Tensor, progress: TileProgress | None = None
    ) -> Tensor: ...

    def decode_bytes(self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
        """Peak activation bytes of a whole (untiled) decode of a ``height`` x ``width`` picture."""
        ...

    def tiled_decode_bytes(
        self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype
    ) -> int:
        """Peak activation bytes of :meth:`decode_tiled` on that picture (one tile's): the room a
        decode asks for when the whole one does not fit."""
        ...

    def preview(self, module: nn.Module) -> LatentPreview:
        """A cheap latent -> RGB map for live previews, fitted to this VAE."""
        ...
