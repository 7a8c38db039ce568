"""ControlNets applied as ComfyUI's ControlNetApplyAdvanced does (the vae=None path).

For every model call of the sampler (positive and negative in one batch, as the UNet runs them):

* each ControlNet whose range holds the step's sigma runs on the UNet's own input
  (``calculate_input(sigma, x)``, the model timestep, the batch's context and SDXL's ``y``) and the
  hint picture, resized to 8x the latent with ComfyUI's ``common_upscale(hint, w, h,
  "nearest-exact", "center")`` (centre crop to the latent's aspect, then nearest-exact);
* the range is ``(percent_to_sigma(start), percent_to_sigma(end))``: a net is skipped when
  ``sigma > first`` or ``sigma < second``;
* each output is multiplied by the strength, and the nets' outputs are summed in order (the
  earlier sum plus the next net's, ComfyUI's ``control_merge``); the sum reaches the UNet as its
  middle-block and skip-connection patches (:class:`~core.models.controlnet.ControlResiduals`).

The stack is a model wrapper (:mod:`core.sampling.patches`): a pass plus a patch, no parameter of
the UNet, the sampler or the request.

A strength of 0 leaves the net out (ComfyUI returns the conditioning unchanged). The ControlNets
are placed by the memory manager with the diffusion model for the "sample" phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from core.detect.catalog import controlnet_family_for, controlnet_fits
from core.errors import ModelMismatchError
from core.generate.passes import Contribution, Plan
from core.generate.pictures import read_picture
from core.generate.request import ImageSettings
from core.generate.workflow_request import ControlNetUse
from core.loading.controlnet import LoadedControlNet, load_controlnet
from core.loading.loader import LoadOptions
from core.models.controlnet import ControlNetModel, ControlResiduals
from core.models.unet import ResStage
from core.preprocess import preprocess
from core.preprocess.registry import ModelRun
from core.sampling.conditioning import Conditioning
from core.sampling.model_sampling import ModelSampling
from core.sampling.patches import Apply, ModelCall, ModelPatches


def hint_tensor(rgb: np.ndarray) -> Tensor:
    """(H, W, 3) uint8 -> (1, 3, H, W) float32 in [0, 1] (ComfyUI's LoadImage, channels first)."""
    return torch.from_numpy(np.array(rgb)).float().div(255.0).permute(2, 0, 1)[None]


def center_resize(image: Tensor, width: int, height: int, mode: str = "nearest-exact") -> Tensor:
    """ComfyUI's ``common_upscale(image, width, height, mode, "center")`` for the interpolate modes:
    the centre crop with the target's aspect ratio, then ``F.interpolate``."""
    old_h, old_w = image.shape[-2], image.shape[-1]
    old_aspect, new_aspect = old_w / old_h, width / height
    x = y = 0
    if old_aspect > new_aspect:
        x = round((old_w - old_w * (new_aspect / old_aspect)) / 2)
    elif old_aspect < new_aspect:
        y = round((old_h - old_h * (old_aspect / new_aspect)) / 2)
    crop = image.narrow(-2, y, old_h - 2 * y).narrow(-1, x, old_w - 2 * x)
    return F.interpolate(crop, size=(height, width), mode=mode)


@dataclass
class AppliedControlNet:
    """One ControlNet with its hint, strength and sigma range, for one generation."""

    module: ControlNetModel
    hint: Tensor  # (1, C, H, W) float32 in [0, 1], as read
    strength: float
    sigma_range: tuple[float, float]  # (from, to): sigmas above ``from`` or below ``to`` skip it
    _sized: dict[tuple[int, int, torch.device, torch.dtype], Tensor] = field(default_factory=dict)

    def hint_for(self, x: Tensor) -> Tensor:
        key = (x.shape[-1] * 8, x.shape[-2] * 8, x.device, x.dtype)
        sized = self._sized.get(key)
        if sized is None:
            sized = center_resize(self.hint, key[0], key[1]).to(device=x.device, dtype=x.dtype)
            self._sized = {key: sized}
        return sized

    def acts_at(self, sigma: float) -> bool:
        first, last = self.sigma_range
        return not (sigma > first or sigma < last)


@dataclass(frozen=True)
class ControlStack:
    """Every ControlNet of one generation, as a model wrapper: each network call gets the summed
    residuals of the nets whose range holds the call's sigma as its patches."""

    nets: Sequence[AppliedControlNet]

    def __call__(self, call: ModelCall, apply: Apply) -> Tensor:
        # ControlNets see the latent alone, before an inpaint model's extra channels are added
        residuals = self.residuals(call.x, call.timestep, call.cond, call.sigma)
        return apply(call if residuals is None else call.with_patches(residuals.patches()))

    def residuals(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, sigma: Tensor | None = None
    ) -> ControlResiduals | None:
        """The nets' summed residuals for the network input ``x`` (every net when ``sigma`` is None)."""
        at = None if sigma is None else float(sigma.reshape(-1)[0])
        total: ControlResiduals | None = None
        for net in self.nets:
            if at is not None and not net.acts_at(at):
                continue
            out = net.module(x, net.hint_for(x), timestep.to(x.dtype), cond.context, cond.pooled)
            scaled = _scale(out, net.strength)
            total = scaled if total is None else _merge(total, scaled)
        return total


def _scale(r: ControlResiduals, strength: float) -> ControlResiduals:
    skips = tuple(None if s is None else s * strength for s in r.skips)
    return ControlResiduals(skips, None if r.middle is None else r.middle * strength)


def _add(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None or b is None:
        return b if a is None else a
    return a + b


def _merge(prev: ControlResiduals, new: ControlResiduals) -> ControlResiduals:
    skips = tuple(_add(p, n) for p, n in zip(prev.skips, new.skips, strict=True))
    return ControlResiduals(skips, _add(prev.middle, new.middle))


@dataclass
class ControlNetCache:
    """Loaded ControlNets kept between generations of one session (by path), so the next picture
    with the same ControlNet neither reads nor places it again."""

    loaded: dict[Path, LoadedControlNet] = field(default_factory=dict)

    def get(self, path: Path, check: object = None) -> LoadedControlNet:
        key = Path(path).resolve()
        found = self.loaded.get(key)
        if found is None:
            found = self.loaded[key] = load_controlnet(key, LoadOptions(check=check))  # type: ignore[arg-type]
        return found

    def keep_only(self, paths: set[Path]) -> list[LoadedControlNet]:
        """Forget the ones not used now; returns them (for the placement to release)."""
        gone = [v for k, v in self.loaded.items() if k not in paths]
        self.loaded = {k: v for k, v in self.loaded.items() if k in paths}
        return gone


def check_fits(net: LoadedControlNet, diffusion_family: str) -> None:
    want = controlnet_family_for(diffusion_family)
    if not controlnet_fits(net.family, diffusion_family):
        raise ModelMismatchError(
            f"{net.path.name} is a ControlNet for {net.family}, and the model is {diffusion_family}",
            why="a ControlNet adds to the skip connections of the UNet it was trained beside",
            fix=f"Use a ControlNet made for {diffusion_family}"
            if want
            else "ControlNets apply to SD1.x, SD2.x and SDXL models",
            code="wrong_controlnet",
        )


def applied(
    uses: tuple[ControlNetUse, ...], nets: list[LoadedControlNet], sampling: ModelSampling,
    model: ModelRun | None = None,
) -> ControlStack:  # fmt: skip
    """The stack for these uses (strength 0 left out), with hints read and ranges in sigmas;
    ``model`` runs the preprocessors that need a model file (depth)."""
    out = []
    for use, net in zip(uses, nets, strict=True):
        if use.strength == 0:
            continue
        picture = read_picture(use.hint, "ControlNet hint")
        if use.preprocessor is not None:
            picture = preprocess(use.preprocessor, picture, model=model)
        hint = hint_tensor(picture)
        rng = (sampling.percent_to_sigma(use.start), sampling.percent_to_sigma(use.end))
        out.append(AppliedControlNet(net.module, hint, use.strength, rng))
    return ControlStack(tuple(out))


def residual_bytes(module: ControlNetModel, batch: int, height: int, width: int, element: int) -> int:
    """Bytes of the residuals one ControlNet hands the UNet (one per skip connection and the middle
    block) for a latent of ``height x width`` and ``batch`` items: what stays alive beside the UNet's
    own activations while it runs. Several ControlNets hold their sum and the next one's at once."""
    cfg = module.config.unet
    total = cfg.model_channels * height * width
    for stage in cfg.input_stages():
        level, channels = (
            (stage.level, stage.out_channels)
            if isinstance(stage, ResStage)
            else (stage.level + 1, stage.channels)
        )
        total += channels * -(-height >> level) * -(-width >> level)
    last = len(cfg.channel_mult) - 1
    total += cfg.middle_channels * -(-height >> last) * -(-width >> last)
    return total * batch * element


@dataclass
class ControlNetPass:
    """The ControlNets of a generation: their stack wraps every model call of the stages the base
    model samples (not the refiner's, which has its own conditioning), once the base network is
    known to have the points their residuals go to."""

    stack: ControlStack
    kind: str = "controlnets"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        if not self.stack.nets:
            return  # every strength 0: the conditioning is left as it was
        points = plan.pipeline.adapter.patch_points
        for net in self.stack.nets:
            points.require(
                "this ControlNet", "wrong_controlnet", blocks=("middle",), joins=net.module.config.blocks
            )
        plan.patches += ModelPatches(wrappers=(self.stack,))
