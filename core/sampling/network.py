"""A diffusion network behind the sampler's one signature.

:class:`core.sampling.denoiser.ModelDenoiser` hands a network the scaled latent in the compute
dtype, float32 timesteps and a :class:`~core.sampling.conditioning.Conditioning`; the adapter
finds the network's :class:`~core.archs.protocols.DiffusionNet` (its architecture package knows how
it takes them) and calls its ``forward`` with this call's network patches (:mod:`core.models.patches`).
What every network shares is done here: extra input channels (inpaint/instruct-pix2pix ``c_concat``)
are appended to the input. Generation and the test run both call networks through it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from core.archs.catalog import NETS, net_of
from core.errors import ModelMismatchError
from core.models.patches import NO_PATCHES, NetworkPatches, PatchPoints
from core.sampling.conditioning import Conditioning

__all__ = ["NetworkAdapter"]


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
        config: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        self.config = config

    @property
    def in_channels(self) -> int:
        c = int(self.config.in_channels)
        return c // 4 if self.convention.packed else c

    @property
    def patch_points(self) -> PatchPoints:
        """The points the network declares (:mod:`core.models.patches`); none for a network that
        declares none (its ``forward`` refuses any patch)."""
        declare = getattr(self.model, "patch_points", None)
        if declare is None:
            return PatchPoints()
        points: PatchPoints = declare()
        return points

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor:
        if self.concat is not None:
            extra = self.concat.to(device=x.device, dtype=x.dtype)
            x = torch.cat([x, extra.expand(x.shape[0], -1, -1, -1)], dim=1)
        if cond.references and not self.convention.references:
            raise ModelMismatchError(
                f"the {self.convention.name} network takes no reference pictures",
                why="reference pictures are read by editing models (FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit)",
                fix="Leave the reference pictures out, or load an editing model",
                code="bad_argument",
            )
        return self.net.forward(self.model, x, timestep, cond, patches)
