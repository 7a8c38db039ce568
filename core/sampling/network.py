"""Each diffusion network's calling convention behind the sampler's one signature.

A family's record names its convention (``DiffusionSpec.network``: ``unet``, ``mmdit``, ``flux``,
``chroma``, ``pixart``); this is the one place that knows what each means. Generation and the test run both
call networks through it.

:class:`core.sampling.denoiser.ModelDenoiser` hands a network the scaled latent in the compute
dtype, float32 timesteps and a :class:`~core.sampling.conditioning.Conditioning`; this adapter
knows how each family takes them: the UNet and MMDiT as ``(x, t, context, y)``, PixArt as
``(x, t, context)`` (T5 tokens, no mask, as ComfyUI gives them), Flux and Chroma
as 2x2-patch tokens with position ids (and Flux-dev's guidance), as ComfyUI's model classes do.
Extra input channels (inpaint/instruct-pix2pix ``c_concat``) are appended to the input; the
network patches of the call (:mod:`core.models.patches`) go to the network's ``forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from core.errors import ModelMismatchError
from core.models.flux import make_img_ids, make_txt_ids, pack_latents, unpack_latents
from core.models.kinds import network_kind
from core.models.patches import NO_PATCHES, NetworkPatches, PatchPoints
from core.sampling.conditioning import Conditioning

#: ComfyUI's guidance when no FluxGuidance node sets one.
FLUX_DEFAULT_GUIDANCE = 3.5


@dataclass(frozen=True, kw_only=True)
class CallingConvention:
    """What callers need to know of one network's inputs besides the call itself (the test run
    builds stand-in inputs from it; the adapter packs by it)."""

    name: str
    packed: bool = False  # takes 2x2-patch tokens: its config counts the latent's channels x4
    text_tokens: int  # tokens its real text encoders produce (the test run's stand-in context)
    unit_timestep: float  # the timestep it takes at sigma 1: discrete index 999, flow x1000, Flux's sigma


#: Every calling convention a family record may name (``DiffusionSpec.network``), read-only.
CONVENTIONS = MappingProxyType(
    {
        c.name: c
        for c in (
            CallingConvention(name="unet", text_tokens=77, unit_timestep=999.0),
            CallingConvention(name="mmdit", text_tokens=154, unit_timestep=1000.0),
            CallingConvention(name="flux", packed=True, text_tokens=512, unit_timestep=1.0),
            CallingConvention(name="chroma", packed=True, text_tokens=512, unit_timestep=1.0),
            CallingConvention(name="pixart", text_tokens=300, unit_timestep=999.0),
        )
    }
)


class NetworkAdapter:
    """``raw_prediction = adapter(x_in, timestep, cond)`` for one diffusion network."""

    def __init__(
        self, model: nn.Module, *, concat: Tensor | None = None, convention: str | None = None
    ) -> None:
        self.model = model
        self.kind = network_kind(model)
        if convention is not None and convention != self.kind:
            raise ModelMismatchError(
                f"this {type(model).__name__} is not the network its family's record names ({convention})",
                fix="Load the diffusion model made for this family",
                code="wrong_kind",
            )
        self.convention = CONVENTIONS[self.kind]
        self.concat = concat
        config: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        self.config = config

    @property
    def in_channels(self) -> int:
        c = int(self.config.in_channels)
        return c // 4 if self.convention.packed else c

    @property
    def patch_points(self) -> PatchPoints:
        """The points the network declares (:mod:`core.models.patches`)."""
        points: PatchPoints = self.model.patch_points()  # type: ignore[operator]
        return points

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor:
        if self.concat is not None:
            extra = self.concat.to(device=x.device, dtype=x.dtype)
            x = torch.cat([x, extra.expand(x.shape[0], -1, -1, -1)], dim=1)
        if self.kind in ("unet", "mmdit"):
            out: Tensor = self.model(x, timestep, cond.context, cond.pooled, patches=patches)
            return out
        if self.kind == "pixart":
            out = self.model(x, timestep, cond.context, patches=patches)
            return out
        return self._flux(x, timestep, cond, patches)

    def _flux(self, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches) -> Tensor:
        b, _, h, w = x.shape
        img_ids = make_img_ids(b, h, w, device=x.device)
        txt_ids = make_txt_ids(b, cond.context.shape[1], device=x.device)
        guidance = None
        if getattr(self.config, "guidance_embed", False):
            guidance = cond.guidance
            if guidance is None:
                guidance = torch.full((b,), FLUX_DEFAULT_GUIDANCE, device=x.device)
            guidance = guidance.to(device=x.device, dtype=torch.float32)
        elif self.kind == "chroma" and cond.guidance is not None:  # ComfyUI's Chroma: 0 unless given
            guidance = cond.guidance.to(device=x.device, dtype=torch.float32)
        tokens = pack_latents(x)
        if self.kind == "flux":
            if cond.pooled is None:
                raise ModelMismatchError(
                    "Flux needs CLIP-L's pooled output, and the conditioning has none",
                    fix="Load a CLIP-L text encoder with the Flux model",
                    code="missing_conditioning",
                )
            out: Tensor = self.model(
                tokens, img_ids, cond.context, txt_ids, t, cond.pooled, guidance, patches=patches
            )
        else:
            out = self.model(tokens, img_ids, cond.context, txt_ids, t, guidance, patches=patches)
        return unpack_latents(out, h, w)
