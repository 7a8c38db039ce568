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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from core.archs.control import (
    BorrowsBase,
    ControlInput,
    ControlModule,
    ControlOutput,
    InpaintHint,
    MakesLatentHint,
    MakesMaskedHint,
    MaskedHint,
    ShapesLatentHint,
)
from core.detect.catalog import controlnet_family_for, controlnet_fits
from core.errors import ModelMismatchError
from core.generate.controlnet_inpaint import check_hint, hand_inpainting
from core.generate.passes import Contribution, Plan, Run
from core.generate.pictures import read_picture
from core.generate.request import ImageSettings
from core.generate.workflow_request import ControlNetUse
from core.loading.controlnet import LoadedControlNet, load_controlnet
from core.loading.loader import LoadOptions
from core.preprocess import preprocess
from core.preprocess.registry import ModelRun
from core.sampling.conditioning import Conditioning
from core.sampling.model_sampling import ModelSampling
from core.sampling.patches import NO_MODEL_PATCHES, Apply, ModelCall, ModelPatches

if TYPE_CHECKING:
    from core.generate.pipeline import Pipeline


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
    """One ControlNet with its hint, strength and sigma range, for one generation. ``downscale``:
    pixels per latent cell of the base model (8; FLUX.2's 16)."""

    module: ControlModule
    #: (1, C, H, W) float32 in [0, 1], as read; None: no control picture (a net that inpaints
    #: alone, :func:`check_hint`)
    hint: Tensor | None
    strength: float
    sigma_range: tuple[float, float]  # (from, to): sigmas above ``from`` or below ``to`` skip it
    downscale: int = 8
    control_type: int | None = None
    _sized: dict[tuple[int, int, torch.device, torch.dtype], Tensor] = field(default_factory=dict)
    #: latent-space hints by latent (h, w), encoded before each stage (:class:`EncodeHints`)
    latents: dict[tuple[int, int], Tensor] = field(default_factory=dict)
    #: an inpainting ControlNet's mask (1, 1, H, W) in [0, 1], white = repaint (:class:`MaskedHint`,
    #: :class:`MakesLatentHint` with inpaint inputs); None: nothing repainted (ComfyUI's mask of
    #: ones when none is given)
    mask: Tensor | None = None
    #: the picture to inpaint (1, 3, H, W) in [0, 1], for a net whose hint carries it beside the
    #: control picture (Z-Image Fun 2.x); None: nothing to inpaint
    inpaint: Tensor | None = None

    @property
    def masks_hint(self) -> bool:
        return isinstance(self.module, MaskedHint) and self.module.mask_hint

    @property
    def takes_inpaint(self) -> bool:
        return isinstance(self.module, MakesLatentHint) and self.module.inpaint_inputs

    def inpaint_at(self, height: int, width: int, mask_resize: str) -> InpaintHint | None:
        """The picture to inpaint and its kept part at a latent of ``height x width`` cells, as
        ComfyUI's Z-Image Fun patch sizes them (None: nothing to inpaint)."""
        if self.inpaint is None or self.mask is None:
            return None
        mode = getattr(self.module, "hint_resize", "nearest-exact")
        picture = center_resize(self.inpaint, width * self.downscale, height * self.downscale, mode)
        keep = 1.0 - self.mask
        pixels = center_resize(keep, picture.shape[-1], picture.shape[-2], mode="bilinear").round()
        return InpaintHint(picture, pixels, center_resize(keep, width, height, mask_resize))

    def picture_at(self, height: int, width: int) -> Tensor:
        """The hint picture centre-cropped and resized to a latent of ``height x width`` cells
        (``nearest-exact``, or the module's ``hint_resize``: Z-Image Fun's ``area``)."""
        mode = getattr(self.module, "hint_resize", "nearest-exact")
        return center_resize(self.given_hint, width * self.downscale, height * self.downscale, mode)

    @property
    def given_hint(self) -> Tensor:
        assert self.hint is not None, "only a net that inpaints alone runs without a hint (check_hint)"
        return self.hint

    def hint_for(self, x: Tensor) -> Tensor:
        if self.module.hint_space == "latent":
            found = self.latents.get((x.shape[-2], x.shape[-1]))
            if found is None:
                raise ModelMismatchError(
                    "the ControlNet's hint was not encoded for this picture size",
                    why=f"no hint latent of {x.shape[-2]}x{x.shape[-1]} cells was made before sampling",
                    fix="Report this; run the picture without the ControlNet meanwhile",
                    code="wrong_controlnet",
                )
            return found.to(device=x.device, dtype=x.dtype)
        key = (x.shape[-1] * self.downscale, x.shape[-2] * self.downscale, x.device, x.dtype)
        sized = self._sized.get(key)
        if sized is None:
            sized = center_resize(self.given_hint, key[0], key[1]).to(device=x.device, dtype=x.dtype)
            self._sized = {key: sized}
        return sized

    def acts_at(self, sigma: float) -> bool:
        first, last = self.sigma_range
        return not (sigma > first or sigma < last)


@dataclass(frozen=True)
class ControlStack:
    """Every ControlNet of one generation, as a model wrapper: each network call gets the summed
    outputs of the nets whose range holds the call's sigma as its patches."""

    nets: Sequence[AppliedControlNet]

    def __call__(self, call: ModelCall, apply: Apply) -> Tensor:
        # ControlNets see the latent alone, before an inpaint model's extra channels are added
        residuals = self.residuals(call.x, call.timestep, call.cond, call.sigma)
        return apply(call if residuals is None else call.with_patches(residuals.patches()))

    def residuals(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, sigma: Tensor | None = None
    ) -> ControlOutput | None:
        """The nets' summed outputs for the network input ``x`` (every net when ``sigma`` is None)."""
        at = None if sigma is None else float(sigma.reshape(-1)[0])
        sigmas = sigma if sigma is not None else torch.zeros(x.shape[0])
        total: ControlOutput | None = None
        for net in self.nets:
            if at is not None and not net.acts_at(at):
                continue
            inp = ControlInput(x, timestep, cond, sigmas, net.hint_for(x), net.control_type)
            scaled = net.module.control(inp).scaled(net.strength)
            total = scaled if total is None else total.merged(scaled)
        return total


def _hint_encoder(pipe: Pipeline, run: Run, own: ShapesLatentHint | None) -> Callable[[Tensor], Tensor]:
    """Pixels in [0, 1] -> the hint latent: the base model's VAE, then its latent format (or the
    net's own)."""
    fmt = pipe.latent_format

    def encode(picture: Tensor) -> Tensor:
        encoded = pipe.encode_pixels(picture * 2.0 - 1.0, run.hooks)
        return fmt.process_in(encoded) if own is None else own.hint_latent(encoded, fmt)

    return encode


@dataclass(frozen=True)
class EncodeHints:
    """Before each base sampler stage: the latent-space nets' hints at the stage's latent size,
    VAE-encoded by the base model's VAE into its latent space (ComfyUI's ``get_control`` with a
    ``vae``: the picture resized to the latent's size in pixels, the net's ``preprocess_image``,
    ``vae.encode``, ``latent_format.process_in`` or the net's own latent format: a
    :class:`~core.archs.control.ShapesLatentHint`); once per size. A
    :class:`~core.archs.control.MakesLatentHint` makes its hint itself from the picture and that
    encoding (Z-Image Fun's extra channels), with the picture to inpaint and its mask sized here."""

    nets: Sequence[AppliedControlNet]

    def __call__(self, settings: ImageSettings, latent: tuple[int, int], run: Run) -> ModelPatches:
        pipe = run.pipeline
        for net in self.nets:
            if net.module.hint_space != "latent" or latent in net.latents:
                continue
            run.hooks.check()
            if net.masks_hint:
                net.latents[latent] = masked_hint(net, latent, pipe, run)
                continue
            module = net.module
            own = module if isinstance(module, ShapesLatentHint) else None
            pixels = None if net.hint is None else net.picture_at(*latent)  # None: inpaints alone
            if own is not None and pixels is not None:
                pixels = own.hint_pixels(pixels)
            encode = _hint_encoder(pipe, run, own)
            if isinstance(module, MakesLatentHint):
                inpaint = net.inpaint_at(*latent, module.mask_resize) if net.takes_inpaint else None
                net.latents[latent] = module.latent_hint(pixels, encode, inpaint)
            else:
                assert pixels is not None, "check_hint refuses a net that needs a hint and has none"
                net.latents[latent] = encode(pixels)
        return NO_MODEL_PATCHES


def masked_hint(net: AppliedControlNet, latent: tuple[int, int], pipe: Pipeline, run: Run) -> Tensor:
    """An inpainting ControlNet's hint (ComfyUI's ControlNetInpaintingAliMamaApply and
    ``get_control``): the kept part ``1 - mask``; the picture times that part resized to the picture
    (bilinear, centre) and rounded, then resized to the latent's pixels and encoded as any latent
    hint; the kept part resized to the latent (``nearest-exact``, centre) as one more channel. A
    net that makes its own (:class:`~core.archs.control.MakesMaskedHint`) gets the resized picture,
    the kept part and the encoding."""
    h, w = latent
    if isinstance(net.module, MakesMaskedHint):
        kept = None if net.mask is None else 1.0 - net.mask
        return net.module.masked_latent_hint(net.picture_at(h, w), kept, _hint_encoder(pipe, run, None))
    hooks = run.hooks
    keep = 1.0 - (net.mask if net.mask is not None else torch.zeros(1, 1, 1, 1))
    picture = net.given_hint
    black = center_resize(keep, picture.shape[-1], picture.shape[-2], mode="bilinear").round()
    pixels = center_resize(picture * black, w * net.downscale, h * net.downscale)
    encoded = pipe.latent_format.process_in(pipe.encode_pixels(pixels * 2.0 - 1.0, hooks))
    small = center_resize(keep, w, h).to(encoded.dtype)
    return torch.cat([encoded, small.expand(encoded.shape[0], -1, -1, -1)], dim=1)


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
            why="a ControlNet adds to the blocks of the network it was trained beside",
            fix=f"Use a ControlNet made for {diffusion_family}"
            if want
            else f"Loadout applies no ControlNets to {diffusion_family} models yet (docs/families.md)",
            code="wrong_controlnet",
        )


def check_use(use: ControlNetUse, net: LoadedControlNet, family: str, settings: ImageSettings) -> None:
    """Refuse in words a ControlNet for another family, or one without the hint it needs."""
    check_fits(net, family)
    check_hint(use, net, settings)


def control_type_index(use: ControlNetUse, net: LoadedControlNet) -> int | None:
    """A union ControlNet's control type as the index its file takes, refused in words for a
    ControlNet without types or a name it does not know."""
    if use.control_type is None:
        return None
    if not net.control_types:
        raise ModelMismatchError(
            f"{net.path.name} has no control types to choose from",
            why="only union ControlNets take a control type",
            fix="Leave the control type out for this ControlNet",
            code="bad_argument",
        )
    if use.control_type not in net.control_types:
        raise ModelMismatchError(
            f"{net.path.name} has no control type {use.control_type!r}",
            why="its types are " + ", ".join(net.control_types),
            fix="Choose one of those",
            code="bad_argument",
        )
    return net.control_types.index(use.control_type)


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
        hint = None
        if use.hint is not None:
            picture = read_picture(use.hint, "ControlNet hint")
            if use.preprocessor is not None:
                picture = preprocess(use.preprocessor, picture, model=model)
            hint = hint_tensor(picture)
        rng = (sampling.percent_to_sigma(use.start), sampling.percent_to_sigma(use.end))
        kind = control_type_index(use, net)
        out.append(AppliedControlNet(net.module, hint, use.strength, rng, control_type=kind))
    return ControlStack(tuple(out))


def residual_bytes(module: ControlModule, batch: int, height: int, width: int, element: int) -> int:
    """Bytes of one ControlNet's output for a latent of ``height x width`` and ``batch`` items: what
    stays alive beside the base network's own activations while it runs. Several ControlNets
    hold their sum and the next one's at once."""
    return module.residual_bytes(batch, height, width, element)


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
            net.module.require_points(points)
            if isinstance(net.module, BorrowsBase):  # weights of the base network, per generation
                net.module.take_from_base(plan.pipeline.nets.diffusion)
            net.downscale = plan.pipeline.latent_format.downscale
            hand_inpainting(net, settings)  # an inpainting net repaints what the generation repaints
        if any(net.module.hint_space == "latent" for net in self.stack.nets):
            plan.stage_patches.append(EncodeHints(self.stack.nets))
        plan.patches += ModelPatches(wrappers=(self.stack,))
