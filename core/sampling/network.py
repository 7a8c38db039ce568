"""A diffusion network behind the sampler's one signature.

:class:`core.sampling.denoiser.ModelDenoiser` hands a network the scaled latent in the compute
dtype, float32 timesteps and a :class:`~core.sampling.conditioning.Conditioning`; the adapter
finds the network's :class:`~core.archs.protocols.DiffusionNet` (its architecture package knows how
it takes them) and calls its ``forward`` with this call's patches. What every network shares is
done here: extra input channels (inpaint/instruct-pix2pix ``c_concat``) are appended to the input,
and ControlNets see the latent before they are. Generation and the test run both call networks
through it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from core.archs.catalog import NETS, net_of
from core.archs.patches import NO_PATCHES, NetPatches
from core.errors import ModelMismatchError
from core.sampling.conditioning import Conditioning

__all__ = ["Control", "NetworkAdapter"]


class Control(Protocol):
    """ControlNets for a UNet: told each forward's sigma, then asked for the residuals."""

    def see_sigma(self, sigma: Tensor) -> None: ...

    def __call__(self, x: Tensor, timestep: Tensor, cond: Conditioning) -> Any: ...


class NetworkAdapter:
    """``raw_prediction = adapter(x_in, timestep, cond)`` for one diffusion network."""

    def __init__(
        self, model: nn.Module, *, concat: Tensor | None = None, convention: str | None = None
    ) -> None:
        self.model = model
        self.net = net_of(model)
        self.kind = self.net.id
        if convention is not None and convention != self.kind:
            expected = NETS[convention].id if convention in NETS else convention
            raise ModelMismatchError(
                f"this {type(model).__name__} is not the network its family's record names ({expected})",
                fix="Load the diffusion model made for this family",
                code="wrong_kind",
            )
        self.convention = self.net.calling
        self.concat = concat
        self.control: Control | None = None  # ControlNets (core/generate/controlnet.py), UNets only
        config: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        self.config = config

    @property
    def in_channels(self) -> int:
        c = int(self.config.in_channels)
        return c // 4 if self.convention.packed else c

    def see_sigma(self, sigma: Tensor) -> None:
        if self.control is not None:
            self.control.see_sigma(sigma)

    def __call__(self, x: Tensor, timestep: Tensor, cond: Conditioning) -> Tensor:
        # ControlNets see the latent alone, before an inpaint model's extra channels are added
        residuals = self.control(x, timestep, cond) if self.control is not None else None
        if self.concat is not None:
            extra = self.concat.to(device=x.device, dtype=x.dtype)
            x = torch.cat([x, extra.expand(x.shape[0], -1, -1, -1)], dim=1)
        patches = NO_PATCHES if residuals is None else NetPatches(control=residuals)
        return self.net.forward(self.model, x, timestep, cond, patches)
