"""The ControlNet of SD1.x / SD2.x / SDXL (lllyasviel's original release and diffusers' ControlNetModel).

A ControlNet is a copy of the UNet's input side (time and label embeddings, input blocks, middle
block, the same keys and shapes as :class:`~core.models.unet.UNetModel`'s) plus:

* ``input_hint_block``: eight 3x3 convolutions with SiLU between them (``.0 .2 ... .14``), three of
  them with stride 2, turning the hint picture (pixels, 8x the latent's size) into a feature map of
  the first block's width, added after ``input_blocks.0``;
* ``zero_convs.N.0``: one 1x1 convolution per input block, whose outputs are the residuals added to
  the UNet's skip connections, and ``middle_block_out.0`` the one added to its middle block.

``forward`` returns :class:`ControlResiduals` (ComfyUI's ``cldm.ControlNet`` returns the same
tensors as ``{"output": [...], "middle": [...]}``), which reach the UNet as two patches
(:mod:`core.models.patches`): a block patch on its middle block and a join patch on its skip
connections; the UNet itself knows nothing of ControlNets. Keys are the original layout
with ``control_model.`` stripped; diffusers' layout is converted by
:func:`core.loading.controlnet.controlnet_diffusers_to_original`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from core.errors import ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.patches import NetworkPatches, Site
from core.models.unet import ResStage, UNetConfig, input_side
from core.models.unet_blocks import LayerFactory
from core.ops.layers import OpSet, default_ops

if TYPE_CHECKING:
    from core.archs.control import ControlInput
    from core.models.patches import PatchPoints


@dataclass(frozen=True)
class ControlResiduals:
    """What ControlNets add to a UNet (ComfyUI's ``control`` dict): one tensor (or None) per skip
    connection, in ``input_blocks`` order, and one for the middle block's output. Each is added to
    the skip before it is concatenated on the output side, as ComfyUI's ``apply_control`` does."""

    skips: tuple[torch.Tensor | None, ...]
    middle: torch.Tensor | None

    def scaled(self, strength: float) -> ControlResiduals:
        skips = tuple(None if s is None else s * strength for s in self.skips)
        return ControlResiduals(skips, None if self.middle is None else self.middle * strength)

    def merged(self, later: object) -> ControlResiduals:
        if not isinstance(later, ControlResiduals) or len(later.skips) != len(self.skips):
            raise _mismatch("two ControlNets of different UNets were stacked")
        skips = tuple(_sum(p, n) for p, n in zip(self.skips, later.skips, strict=True))
        return ControlResiduals(skips, _sum(self.middle, later.middle))

    def patches(self) -> NetworkPatches:
        """The residuals as the UNet's patches: the middle one after its middle block, each skip's
        where the output side takes it."""
        return NetworkPatches(blocks=(self._middle,), joins=(self._skip,))

    def _middle(self, h: torch.Tensor, site: Site) -> torch.Tensor:
        return _add(h, self.middle) if site.stage == "middle" else h

    def _skip(self, h: torch.Tensor, skip: torch.Tensor, site: Site) -> tuple[torch.Tensor, torch.Tensor]:
        if len(self.skips) <= site.index:
            raise _mismatch(f"{len(self.skips)} residuals for a UNet with more skip connections")
        return h, _add(skip, self.skips[site.index])


def _add(h: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    if residual is None:
        return h
    if residual.shape != h.shape:
        raise _mismatch(f"it gives a {list(residual.shape)} residual where the UNet has {list(h.shape)}")
    return (h + residual).to(h.dtype)  # as ComfyUI's in-place ``h += ctrl``


def _sum(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None or b is None:
        return b if a is None else a
    return a + b


def _mismatch(why: str) -> ModelMismatchError:
    return ModelMismatchError(
        "the ControlNet does not fit this diffusion model",
        why=why,
        fix="Use a ControlNet made for the loaded model's family (SD1.5 or SDXL)",
        code="wrong_controlnet",
    )


#: (out, in) channels of the hint block's convolutions after the first, and their strides
HINT_LAYERS = ((16, 16, 1), (32, 16, 2), (32, 32, 1), (96, 32, 2), (96, 96, 1), (256, 96, 2))


@dataclass(frozen=True)
class ControlNetConfig:
    """The UNet input side it copies and the hint picture's channels (3: an RGB picture)."""

    unet: UNetConfig
    hint_channels: int = 3

    @property
    def blocks(self) -> int:
        """Input blocks (= zero convolutions): input_blocks.0 plus every stage."""
        return 1 + len(self.unet.input_stages())

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[int, ...]]) -> ControlNetConfig:
        """Read from an original-layout key -> shape map (``control_model.`` stripped)."""
        from core.models.unet_shapes import ShapeReader

        reader = ShapeReader(shapes)
        hint = reader.shape("input_hint_block.0.weight")
        model_channels, in_ch = reader.shape("input_blocks.0.0.weight")[:2]
        ted = reader.shape("time_embed.0.weight")[0]
        if ted != 4 * model_channels:
            raise reader.fail(f"time embedding width {ted} is not 4 x {model_channels} model channels")
        mult, nrb, depth = reader.input_side(model_channels)
        context_dim, use_linear = reader.transformer_shape()
        heads, head_channels = (8, None) if context_dim == 768 else (None, 64)
        adm = shapes.get("label_emb.0.0.weight")
        try:
            unet = UNetConfig(
                in_channels=in_ch,
                out_channels=in_ch,
                model_channels=model_channels,
                channel_mult=mult,
                num_res_blocks=nrb,
                transformer_depth=depth,
                transformer_depth_middle=reader.middle_depth(),
                transformer_depth_output=(0,) * sum(n + 1 for n in nrb),  # a ControlNet has no output side
                context_dim=context_dim,
                num_heads=heads,
                num_head_channels=head_channels,
                use_linear_in_transformer=use_linear,
                adm_in_channels=None if adm is None else adm[1],
            )
        except ValueError as e:
            raise reader.fail(str(e)) from None
        return cls(unet, hint_channels=hint[1])


class ControlNetModel(nn.Module):
    """``forward(x, hint, timesteps, context, y=None)`` -> the residuals, unscaled; a
    :class:`~core.archs.control.ControlModule` whose hint is the picture itself."""

    hint_space: Literal["pixels", "latent"] = "pixels"

    def __init__(
        self,
        config: ControlNetConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        cfg = config.unet
        f = LayerFactory(ops, device, dtype)
        self.time_embed, self.label_emb, self.input_blocks, self.middle_block = input_side(f, cfg)
        hint: list[nn.Module] = [f.conv(config.hint_channels, 16, 3, padding=1), nn.SiLU()]
        for out, inp, stride in HINT_LAYERS:
            hint += [f.conv(inp, out, 3, stride=stride, padding=1), nn.SiLU()]
        hint.append(f.conv(256, cfg.model_channels, 3, padding=1))
        self.input_hint_block = nn.Sequential(*hint)
        widths = [cfg.model_channels]
        for stage in cfg.input_stages():
            widths.append(getattr(stage, "out_channels", getattr(stage, "channels", 0)))
        self.zero_convs = nn.ModuleList(nn.Sequential(f.conv(w, w, 1)) for w in widths)
        self.middle_block_out = nn.Sequential(f.conv(cfg.middle_channels, cfg.middle_channels, 1))

    def forward(
        self,
        x: torch.Tensor,
        hint: torch.Tensor,
        timesteps: torch.Tensor,
        context: torch.Tensor | None,
        y: torch.Tensor | None = None,
    ) -> ControlResiduals:
        """x: the UNet's input (B, C, h, w); hint: (B, hint_channels, 8h, 8w) in [0, 1]; timesteps
        (B,); context (B, L, width); y: SDXL's (B, adm) vector."""
        dtype = x.dtype
        cfg = self.config.unet
        t = timesteps.reshape(-1).to(x.device)
        if t.shape[0] != x.shape[0]:
            t = t.expand(x.shape[0])
        emb: torch.Tensor = self.time_embed(timestep_embedding(t, cfg.model_channels).to(dtype))
        guided: torch.Tensor | None = self.input_hint_block(hint.to(dtype))
        if self.label_emb is not None:
            if y is None:
                raise ModelMismatchError(
                    "this ControlNet is an SDXL one and needs SDXL's conditioning",
                    why="it embeds SDXL's size and pooled-text vector with the timestep",
                    fix="Use it with an SDXL model, or use an SD1.5 ControlNet with SD1.5 models",
                    code="wrong_controlnet",
                )
            emb = emb + self.label_emb(y.to(dtype))
        if context is not None:
            context = context.to(dtype)
        outs: list[torch.Tensor | None] = []
        h = x
        for block, zero in zip(self.input_blocks, self.zero_convs, strict=True):
            h = block(h, emb, context)
            if guided is not None:
                h = h + guided
                guided = None
            outs.append(zero(h))
        h = self.middle_block(h, emb, context)
        return ControlResiduals(tuple(outs), self.middle_block_out(h))

    def control(self, inp: ControlInput) -> ControlResiduals:
        x = inp.x
        out: ControlResiduals = self(x, inp.hint, inp.timestep.to(x.dtype), inp.cond.context, inp.cond.pooled)
        return out

    def require_points(self, points: PatchPoints) -> None:
        points.require("this ControlNet", "wrong_controlnet", blocks=("middle",), joins=self.config.blocks)

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """One residual per skip connection and the middle block's, for a latent of ``height x
        width``: what stays alive beside the UNet's own activations while it runs."""
        cfg = self.config.unet
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
