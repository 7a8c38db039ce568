"""alibaba-pai's Z-Image Fun ControlNet (``Z-Image-Turbo-Fun-Controlnet-Union`` 1.0, 2.0, 2.1 and
the 2.1 lite release) as a :class:`~core.archs.control.ControlModule`, computed as ComfyUI's
``ZImageFunControlnet`` model patch does (``comfy/ldm/lumina/controlnet.py``,
``comfy_extras/nodes_model_patch.py``):

* the hint is the control picture VAE-encoded into the Flux latent space (16 channels); the 2.x
  releases take 33: the control latent, a mask channel and the latent of the picture to inpaint.
  With a picture to inpaint (:class:`~core.archs.control.InpaintHint`) the mask channel is the kept
  part (1 kept, 0 repainted; ``nearest`` to the latent) and the picture is grey (0.5) where it is
  repainted; without one, a zero mask and the latent of a 0.5-grey picture. A 2.x file may run
  with no control picture when it has a picture to inpaint (ComfyUI's node takes ``image`` as
  optional): the control part is then the latent of a 0.5-grey picture. The pictures are
  resized with ``"area"`` (ComfyUI's ``common_upscale(..., "area", "center")``);
* the hint's 2x2 patches are embedded (``control_all_x_embedder.2-1``) into the control's tokens,
  one per picture token of the base network;
* 1.0: two plain refiner blocks run over them (``control_noise_refiner``); 2.x: each of the base
  network's two noise refiners is followed by a control block (its input: the embedded picture
  before the refiners) whose hint is added to the refined picture tokens; in 2.0, whose refiner
  control blocks were released zeroed (ComfyUI's "broken"), the main control blocks stand in:
  the first after refiner 0, the others after refiner 1 (the hint of the second is added);
* control block ``k`` runs over the control's tokens (the first adds the base network's picture
  tokens as the joint blocks receive them) and its hint, times the strength, is added to the
  picture tokens after joint block ``k * round(30 / n)`` (n control blocks: 1.0's six at 0, 5,
  ... 25, 2.x's fifteen at 0, 2, ... 28, lite's three at 0, 10, 20).

The control blocks attend to the picture's tokens alone (no caption, no pad tokens) and add to
them alone; diffusers' ``ZImageControlNetModel`` differs (docs/families.md). The blocks run
lazily as the base forward reaches them (stream patches), so no hint outlives its block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.archs.control import ControlInput, ControlOutput, HintSpace, InpaintHint
from core.archs.nextdit.fun_blocks import FunBlock
from core.errors import ModelMismatchError
from core.models.nextdit.config import NextDiTConfig
from core.models.patches import NetworkPatches, PatchPoints, Site, StageInput
from core.ops.layers import OpSet, default_ops

#: the latent channels of the control picture, and the 2.x releases' whole hint (+ mask + inpaint)
LATENT_CHANNELS = 16
INPAINT_CHANNELS = 2 * LATENT_CHANNELS + 1
#: ComfyUI spaces the control blocks over Z-Image's 30 joint blocks
BASE_BLOCKS = 30
FEATURE = "the Z-Image Fun ControlNet"


def comfy_places(layers: int) -> tuple[int, ...]:
    """The joint blocks after which ComfyUI adds control block k's hint: ``k * round(30 / n)``."""
    step = round(BASE_BLOCKS / layers)
    return tuple(k * step for k in range(layers))


class ZImageFunControl(nn.Module):
    """The control network: ``layers`` control blocks, the hint embedder for ``in_channels``
    latent channels, and two refiner blocks (plain, or control blocks: ``refiner_control``)."""

    hint_space: HintSpace = "latent"
    hint_resize = "area"
    #: the kept part to the latent's size as ComfyUI's patch resizes it (not ``nearest-exact``)
    mask_resize = "nearest"

    def __init__(
        self,
        cfg: NextDiTConfig,
        *,
        layers: int,
        in_channels: int,
        refiner_control: bool,
        refiner_before: bool | None = None,
        places: tuple[int, ...] | None = None,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dev = torch.device(device) if device is not None else None
        self.cfg, self.in_channels, self.refiner_control = cfg, in_channels, refiner_control
        self.places = places if places is not None else comfy_places(layers)
        self.control_layers = nn.ModuleList(
            FunBlock(cfg, before=i == 0, after=True, ops=ops, device=dev, dtype=dtype) for i in range(layers)
        )
        patch_in = cfg.patch_size**2 * in_channels
        embed = ops.Linear(patch_in, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.control_all_x_embedder = nn.ModuleDict({f"{cfg.patch_size}-1": embed})
        first_before = refiner_control if refiner_before is None else refiner_before
        self.control_noise_refiner = nn.ModuleList(
            FunBlock(
                cfg, before=i == 0 and first_before, after=refiner_control, ops=ops, device=dev, dtype=dtype
            )
            for i in range(cfg.n_refiner_layers)
        )
        self._broken: bool | None = None

    @property
    def broken(self) -> bool:
        """2.0's zeroed refiner control: its first refiner block's ``after_proj`` is all zero
        (ComfyUI reads it on fifteen-block files alone; the released files of other sizes have
        none zeroed); read once, from the loaded weights."""
        if self._broken is None:
            after = self.refiner_block(0).after_proj if self.refiner_control else None
            self._broken = bool(after is not None and not torch.count_nonzero(after.weight))
        return self._broken

    def refiner_block(self, index: int) -> FunBlock:
        block = self.control_noise_refiner[index]
        assert isinstance(block, FunBlock)
        return block

    def control_block(self, index: int) -> FunBlock:
        block = self.control_layers[index]
        assert isinstance(block, FunBlock)
        return block

    def embed(self, hint: Tensor, batch: int) -> Tensor:
        """(1, C, h, w) latent hint -> (batch, tokens, width): 2x2 patches, row by row (odd sizes
        padded as the base network pads the latent)."""
        p = self.cfg.patch_size
        _, c, height, width = hint.shape
        if (-height) % p or (-width) % p:
            hint = F.pad(hint, (0, (-width) % p, 0, (-height) % p), mode="circular")
        h, w = hint.shape[-2] // p, hint.shape[-1] // p
        tokens = hint.view(1, c, h, p, w, p).permute(0, 2, 4, 3, 5, 1).reshape(1, h * w, -1)
        out: Tensor = self.control_all_x_embedder[f"{p}-1"](tokens)
        return out.expand(batch, -1, -1)

    @property
    def inpaint_inputs(self) -> bool:
        """The 2.x files: the hint carries a mask and a picture to inpaint
        (:class:`~core.archs.control.MakesLatentHint`)."""
        return self.in_channels == INPAINT_CHANNELS

    def latent_hint(
        self, picture: Tensor | None, encode: Callable[[Tensor], Tensor], inpaint: InpaintHint | None = None
    ) -> Tensor:
        """The hint from the control picture (in [0, 1], resized) and ``encode`` (pixels in [0, 1] ->
        the base model's latent space); the 2.x files': the kept part and the picture to inpaint
        greyed where it is repainted (ComfyUI's ``(picture - 0.5) * kept + 0.5``), or with nothing to
        inpaint a zero mask and a 0.5-grey picture (ComfyUI's defaults). With no control picture
        (ComfyUI's node without an ``image``) the control part is the latent of a 0.5-grey picture
        of the picture to inpaint's size, as ComfyUI's ``encode_latent_cond`` makes it."""
        if picture is None and (inpaint is None or not self.inpaint_inputs):
            raise ModelMismatchError(
                f"{FEATURE} was given no control picture and "
                + ("takes no picture to inpaint" if not self.inpaint_inputs else "nothing to inpaint"),
                why="with no control picture only its 2.x files run (on a picture to inpaint and its mask)",
                fix="Give it a control picture, or use it to inpaint a masked part of a picture",
                code="wrong_controlnet",
            )
        if self.in_channels == LATENT_CHANNELS:
            assert picture is not None
            return encode(picture)
        if inpaint is None:
            assert picture is not None
            grey = encode(torch.full_like(picture, 0.5))
            return torch.cat([encode(picture), torch.zeros_like(grey[:, :1]), grey], dim=1)
        kept = encode((inpaint.picture - 0.5) * inpaint.keep_pixels + 0.5)
        cells = inpaint.keep_cells.to(kept.dtype).expand(kept.shape[0], -1, -1, -1)
        latent = encode(torch.full_like(inpaint.picture, 0.5) if picture is None else picture)
        return torch.cat([latent, cells, kept], dim=1)

    def control(self, inp: ControlInput) -> ControlOutput:
        hint = inp.hint
        if hint.ndim != 4 or hint.shape[1] != self.in_channels:
            raise ModelMismatchError(
                f"{FEATURE} takes a hint of {self.in_channels} latent channels",
                why=f"it was given one of shape {list(hint.shape)}",
                fix="Give the ControlNet a picture; Loadout encodes it with the model's VAE",
                code="wrong_controlnet",
            )
        return FunOutput(self, hint, inp.x.shape[0], 1.0)

    def require_points(self, points: PatchPoints) -> None:
        streams = ("noise_refiner", "joint") if self.refiner_control else ("joint",)
        points.require(FEATURE, "wrong_controlnet", streams=streams, fix="Use it with a Z-Image model")

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """The control's state, the base's stage input it keeps and one hint (3 widths a token)
        beside a control block's own peak (3 widths and 3 MLP widths a token, as a joint block)."""
        p = self.cfg.patch_size
        tokens = -(-height // p) * -(-width // p)
        return batch * tokens * (6 * self.cfg.dim + 3 * self.cfg.ffn_hidden) * element


@dataclass(frozen=True)
class FunOutput:
    """One Fun ControlNet's part of a network call: its blocks run as the base forward reaches
    them (a lazy model patch: outputs of several apply one after the other)."""

    module: ZImageFunControl
    hint: Tensor
    batch: int
    strength: float

    def scaled(self, strength: float) -> ControlOutput:
        return replace(self, strength=self.strength * strength)

    def merged(self, later: ControlOutput) -> ControlOutput:
        return Chained((self, later))

    def patches(self) -> NetworkPatches:
        return NetworkPatches(streams=(FunRun(self),))


@dataclass(frozen=True)
class Chained:
    """Outputs that apply one after the other (each its own patches)."""

    parts: tuple[ControlOutput, ...]

    def scaled(self, strength: float) -> ControlOutput:
        return Chained(tuple(p.scaled(strength) for p in self.parts))

    def merged(self, later: ControlOutput) -> ControlOutput:
        return Chained((*self.parts, later))

    def patches(self) -> NetworkPatches:
        out = NetworkPatches()
        for part in self.parts:
            out = out + part.patches()
        return out


class FunRun:
    """One forward's run of the control: its state carried from block to block."""

    def __init__(self, out: FunOutput) -> None:
        self.out, self.module = out, out.module
        self.state: Tensor | None = None
        self.done = -1  # the last control block run

    def __call__(self, h: Tensor, site: Site, stage: StageInput) -> Tensor:
        m = self.module
        if site.stage == "noise_refiner" and m.refiner_control:
            hint = self._refiner(site.index, stage)
        elif site.stage == "joint" and site.index in m.places:
            hint = self._control(m.places.index(site.index), stage)
        else:
            return h
        if hint is not None:
            start, count = stage.image
            h[:, start : start + count] += hint * self.out.strength
        return h

    def _inputs(self, stage: StageInput) -> tuple[Tensor, Tensor]:
        """The base's picture tokens at the stage's start and their rotary angles."""
        start, count = stage.image
        x = stage.first[:, start : start + count]
        if x.shape[-1] != self.module.cfg.dim:
            raise ModelMismatchError(
                f"{FEATURE} is {self.module.cfg.dim} wide and the model {x.shape[-1]}",
                why="a ControlNet adds to the blocks of the network it was trained beside",
                fix="Use it with a Z-Image model",
                code="wrong_controlnet",
            )
        return x, stage.pe[:, :, start : start + count]

    def _start(self, x: Tensor) -> Tensor:
        return self.module.embed(self.out.hint.to(x.dtype), x.shape[0])

    def _step(self, block: FunBlock, x: Tensor, pe: Tensor, vec: Tensor) -> Tensor:
        """One control block on the state; its hint."""
        assert self.state is not None
        out: tuple[Tensor, Tensor] = block(self.state, x, pe, vec)
        hint, self.state = out
        return hint

    def _refiner(self, index: int, stage: StageInput) -> Tensor | None:
        m, (x, pe) = self.module, self._inputs(stage)
        if index == 0 or self.state is None:  # a forward starts (the same patches may run again)
            self.state, self.done = self._start(x), -1
        if not m.broken:
            return self._step(m.refiner_block(index), x, pe, stage.vec)
        if index == 0:
            return self._step(m.control_block(0), x, pe, stage.vec)
        first: Tensor | None = None  # the others' hints are dropped as they come (ComfyUI's)
        for i in range(1, len(m.control_layers)):
            hint = self._step(m.control_block(i), x, pe, stage.vec)
            first = hint if first is None else first
        return first

    def _control(self, k: int, stage: StageInput) -> Tensor | None:
        m, (x, pe) = self.module, self._inputs(stage)
        if k == 0 and not m.refiner_control:  # a forward starts (the same patches may run again)
            self.state, self.done = None, -1
        if self.state is None:
            self.state = self._start(x)
            if not m.refiner_control:
                for i in range(len(m.control_noise_refiner)):
                    self.state = m.refiner_block(i).run(self.state, pe, stage.vec)
        hint: Tensor | None = None
        while self.done < k:
            self.done += 1
            hint = self._step(m.control_block(self.done), x, pe, stage.vec)
        return hint
