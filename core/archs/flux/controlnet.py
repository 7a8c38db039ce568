"""FLUX.1 ControlNets: InstantX's / Shakker-Labs' (diffusers' ``FluxControlNetModel`` files, union
or not) and XLabs' (Black Forest Labs' key names, their own hint convolutions), as ComfyUI's
``ControlNetFlux`` computes them.

Both are a few Flux blocks (:mod:`core.models.flux_blocks`) run beside the base network on its
input, with the hint added to the picture's tokens after ``img_in`` through ``pos_embed_input``:

* InstantX / Shakker-Labs (``hint_space`` "latent"): the hint picture VAE-encoded into Flux's latent
  space, packed into 2x2-patch tokens as the latent is. Alimama's inpainting net (the same layout,
  ``pos_embed_input`` over 17 channels per cell) takes the picture blacked out where it is repainted
  and the kept part as a 17th channel (``mask_hint``: ComfyUI's ``concat_mask``), packed with it.
  A union net (``controlnet_mode_embedder``) takes its control type as one more text token in front
  of the prompt's (at position 0); with no type set it runs without one (ComfyUI's
  ``control_type`` []).
* XLabs (``hint_space`` "pixels"): the picture at the latent's size in pixels, ``x * 2 - 1``,
  through ``input_hint_block`` (eight 3x3 convolutions, three of stride 2, SiLU between) and packed.

After each of its double blocks the net gives ``controlnet_blocks[i](img)``, after each single block
``controlnet_single_blocks[i]`` of the image tokens. ComfyUI spreads them over the base network's 19
double and 38 single blocks (fixed counts, a real FLUX.1's): ``repeat = ceil(19 / n)``; the latent
nets give each output to ``repeat`` blocks in a row (block ``i`` takes output ``i // repeat``, as
diffusers' ``interval_control``), XLabs' repeat the whole list (block ``i`` takes ``i % n``). The base
network adds them to the picture's tokens after its double blocks and to the image part of its single
blocks' joint sequence (text first), the first ``L`` image tokens (Kontext's reference tokens follow
them and get nothing)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.flux.net import FLUX_DEFAULT_GUIDANCE
from core.errors import ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux import (
    TIME_EMBEDDING_SIZE,
    FluxConfig,
    joint_ids,
    make_img_ids,
    make_txt_ids,
    pack_latents,
)
from core.models.flux_blocks import DoubleStreamBlock, MLPEmbedder, SingleStreamBlock, rope
from core.models.patches import NetworkPatches, PatchPoints, Site
from core.ops.layers import OpSet, default_ops

if TYPE_CHECKING:
    from core.archs.control import ControlInput

#: the base network's block counts ComfyUI spreads a FLUX.1 ControlNet's outputs over
MAIN_DOUBLE, MAIN_SINGLE = 19, 38
#: InstantX's union control types, by index (ComfyUI's Shakker-Labs / InstantX union type names)
UNION_TYPES = ("canny", "tile", "depth", "blur", "pose", "gray", "low quality")


@dataclass(frozen=True)
class FluxControlConfig:
    """A FLUX.1 ControlNet: its Flux blocks' config (``depth``/``depth_single_blocks`` its own),
    ``hint_channels`` the channels ``pos_embed_input`` takes per token, ``union_modes`` the control
    types a union net embeds (0: not a union net), ``pixels`` XLabs' own hint convolutions."""

    flux: FluxConfig
    hint_channels: int
    union_modes: int = 0
    pixels: bool = False


def hint_block(ops: OpSet, device: torch.device | None, dtype: torch.dtype | None) -> nn.Sequential:
    """XLabs' ``input_hint_block``: 3 -> 16 channels, 1/8 of the picture's size."""
    layers: list[nn.Module] = []
    for i in range(8):
        if i:
            layers.append(nn.SiLU())
        stride = 2 if i in (2, 4, 6) else 1
        layers.append(
            ops.Conv2d(3 if i == 0 else 16, 16, 3, padding=1, stride=stride, device=device, dtype=dtype)
        )
    return nn.Sequential(*layers)


class FluxControlNet(nn.Module):
    """A FLUX.1 ControlNet (a :class:`~core.archs.control.ControlModule`); state-dict keys in Black
    Forest Labs' names plus ``pos_embed_input``, ``controlnet_blocks.N``,
    ``controlnet_single_blocks.N``, ``controlnet_mode_embedder`` and ``input_hint_block.N``."""

    def __init__(
        self,
        config: FluxControlConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.hint_space: Literal["pixels", "latent"] = "pixels" if config.pixels else "latent"
        self.union = config.union_modes > 0
        cfg, dev = config.flux, torch.device(device) if device is not None else None
        hidden = cfg.hidden_size
        self.img_in = ops.Linear(cfg.in_channels, hidden, bias=True, device=dev, dtype=dtype)
        self.time_in = MLPEmbedder(TIME_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.vector_in = MLPEmbedder(cfg.vec_in_dim, hidden, ops=ops, device=dev, dtype=dtype)
        self.guidance_in: MLPEmbedder | None = None
        if cfg.guidance_embed:
            self.guidance_in = MLPEmbedder(TIME_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.txt_in = ops.Linear(cfg.context_in_dim, hidden, bias=True, device=dev, dtype=dtype)
        self.double_blocks = nn.ModuleList(
            DoubleStreamBlock(
                hidden, cfg.num_heads, cfg.mlp_ratio, cfg.qkv_bias, modulation=True, ops=ops, device=dev,
                dtype=dtype,
            )
            for _ in range(cfg.depth)
        )  # fmt: skip
        self.single_blocks = nn.ModuleList(
            SingleStreamBlock(
                hidden, cfg.num_heads, cfg.mlp_ratio, modulation=True, ops=ops, device=dev, dtype=dtype
            )
            for _ in range(cfg.depth_single_blocks)
        )
        self.controlnet_blocks = nn.ModuleList(
            ops.Linear(hidden, hidden, bias=True, device=dev, dtype=dtype) for _ in range(cfg.depth)
        )
        self.controlnet_single_blocks = nn.ModuleList(
            ops.Linear(hidden, hidden, bias=True, device=dev, dtype=dtype)
            for _ in range(cfg.depth_single_blocks)
        )
        self.controlnet_mode_embedder: nn.Embedding | None = None
        if self.union:
            self.controlnet_mode_embedder = ops.Embedding(config.union_modes, hidden, device=dev, dtype=dtype)
        self.pos_embed_input = ops.Linear(config.hint_channels, hidden, bias=True, device=dev, dtype=dtype)
        self.input_hint_block: nn.Sequential | None = hint_block(ops, dev, dtype) if config.pixels else None

    @property
    def mask_hint(self) -> bool:
        """Alimama's inpainting net: a latent hint wider than the latent (the mask beside it), a
        :class:`~core.archs.control.MaskedHint`."""
        return not self.config.pixels and self.config.hint_channels > self.config.flux.in_channels

    def hint_tokens(self, hint: Tensor, batch: int) -> Tensor:
        """The hint as 2x2-patch tokens for ``pos_embed_input`` (``batch`` rows)."""
        if self.input_hint_block is not None:
            hint = self.input_hint_block(hint * 2.0 - 1.0)
        tokens = pack_latents(hint)
        return tokens.expand(batch, -1, -1) if tokens.shape[0] == 1 else tokens

    def with_mode(self, txt: Tensor, control_type: int | None) -> Tensor:
        """A union net's control type as one more text token in front (none without a type)."""
        if self.controlnet_mode_embedder is None or control_type is None:
            return txt
        modes = self.config.union_modes
        if not 0 <= control_type < modes:
            raise ModelMismatchError(
                f"this union ControlNet has {modes} control types, not type {control_type}",
                why="the type indexes the net's own embedding of its types",
                fix="Choose one of its first types, or none",
                code="bad_argument",
            )
        mode = self.controlnet_mode_embedder(torch.tensor([control_type], device=txt.device)).to(txt.dtype)
        return torch.cat((mode[None].expand(txt.shape[0], -1, -1), txt), dim=1)

    def forward(
        self, x: Tensor, hint: Tensor, timesteps: Tensor, cond: Conditioning, control_type: int | None = None
    ) -> FluxControl:
        """The unscaled outputs for the base network's input latent ``x`` (B, C, h, w)."""
        b, _, h, w = x.shape
        dtype = x.dtype
        img = self.img_in(pack_latents(x)) + self.pos_embed_input(self.hint_tokens(hint.to(dtype), b))
        vec = self.time_in(timestep_embedding(timesteps, TIME_EMBEDDING_SIZE, time_factor=1000.0).to(dtype))
        if self.guidance_in is not None:
            guidance = cond.guidance if cond.guidance is not None else torch.full((b,), FLUX_DEFAULT_GUIDANCE)
            g = timestep_embedding(guidance.to(x.device, dtype), TIME_EMBEDDING_SIZE, time_factor=1000.0)
            vec = vec + self.guidance_in(g.to(dtype))
        if cond.pooled is None:
            raise ModelMismatchError(
                "a FLUX.1 ControlNet needs CLIP-L's pooled output, and the conditioning has none",
                why="it embeds the pooled vector as the FLUX.1 network does",
                fix="Use it with a FLUX.1 model and its CLIP-L text encoder",
                code="wrong_controlnet",
            )
        vec = vec + self.vector_in(cond.pooled.to(dtype))
        txt = self.txt_in(cond.context.to(dtype))
        text_tokens = txt.shape[1]  # the base network's text length
        txt = self.with_mode(txt, control_type)
        img_ids = make_img_ids(b, h, w, device=x.device)
        ids = joint_ids(make_txt_ids(b, txt.shape[1], device=x.device), img_ids, b)
        pe = rope(ids, self.config.flux.axes_dim, self.config.flux.theta)
        double: list[Tensor] = []
        for block, out in zip(
            cast(Sequence[DoubleStreamBlock], self.double_blocks), self.controlnet_blocks, strict=True
        ):
            img, txt = block(img, txt, pe, block.modulations(vec))
            double.append(out(img))
        single: list[Tensor] = []
        tokens = torch.cat((txt, img), dim=1)
        for sblock, out in zip(
            cast(Sequence[SingleStreamBlock], self.single_blocks), self.controlnet_single_blocks, strict=True
        ):
            tokens = sblock(tokens, pe, sblock.modulations(vec))
            single.append(out(tokens[:, txt.shape[1] :]))
        consecutive = not self.config.pixels
        return FluxControl(
            spread(double, MAIN_DOUBLE, consecutive), spread(single, MAIN_SINGLE, consecutive), text_tokens
        )

    def control(self, inp: ControlInput) -> FluxControl:
        x = inp.x
        # ComfyUI hands the ControlNet its timestep in the ControlNet's dtype
        out: FluxControl = self(x, inp.hint, inp.timestep.to(x.dtype), inp.cond, inp.control_type)
        return out

    def require_points(self, points: PatchPoints) -> None:
        points.require("this FLUX.1 ControlNet", "wrong_controlnet", blocks=("double", "single"))

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """One output per block of the net (shared by the base blocks it is spread over)."""
        tokens = -(-height // 2) * -(-width // 2)
        cfg = self.config.flux
        return (cfg.depth + cfg.depth_single_blocks) * batch * tokens * cfg.hidden_size * element


def spread(outputs: Sequence[Tensor], main: int, consecutive: bool) -> tuple[Tensor | None, ...]:
    """A net's outputs over ``main`` base blocks as ComfyUI spreads them: each ``ceil(main / n)``
    times in a row (``consecutive``), or the whole list again and again; cut at ``main``."""
    if not outputs:
        return ()
    repeat = math.ceil(main / len(outputs))
    if consecutive:
        return tuple(o for o in outputs for _ in range(repeat))[:main]
    return tuple(list(outputs) * repeat)[:main]


@dataclass(frozen=True)
class FluxControl:
    """What FLUX.1 ControlNets add to one call of the base network: per double block (the picture's
    tokens) and per single block (the image part of the joint sequence, after ``text_tokens``); the
    same tensor may serve several blocks. A :class:`~core.archs.control.ControlOutput`."""

    double: tuple[Tensor | None, ...]
    single: tuple[Tensor | None, ...]
    text_tokens: int

    def scaled(self, strength: float) -> FluxControl:
        done: dict[int, Tensor] = {}  # a tensor shared by several blocks is scaled once

        def scale(t: Tensor | None) -> Tensor | None:
            if t is None:
                return None
            if id(t) not in done:
                done[id(t)] = t * strength
            return done[id(t)]

        return FluxControl(
            tuple(scale(t) for t in self.double), tuple(scale(t) for t in self.single), self.text_tokens
        )

    def merged(self, later: object) -> FluxControl:
        if not isinstance(later, FluxControl):
            raise TypeError("a FLUX.1 ControlNet's output merged with another network's")
        return FluxControl(
            _sum_lists(self.double, later.double), _sum_lists(self.single, later.single), self.text_tokens
        )

    def patches(self) -> NetworkPatches:
        return NetworkPatches(blocks=(self._add,))

    def _add(self, h: Tensor, site: Site) -> Tensor:
        if site.stage == "double":
            found, start = self.double, 0
        elif site.stage == "single":
            found, start = self.single, self.text_tokens
        else:
            return h
        add = found[site.index] if site.index < len(found) else None
        if add is None:
            return h
        end = start + add.shape[1]
        if start == 0 and end == h.shape[1]:
            return (h + add).to(h.dtype)  # as ComfyUI's in-place ``img[:, :n] += add``
        out = h.clone()
        out[:, start:end] = (h[:, start:end] + add).to(h.dtype)
        return out


def _sum_lists(a: tuple[Tensor | None, ...], b: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
    """ComfyUI's ``control_merge``: position by position the earlier sum plus the later net's (one
    sum per pair of shared tensors, so two spread nets hold no more sums than they have outputs)."""
    out: list[Tensor | None] = []
    sums: dict[tuple[int, int], Tensor] = {}
    for i in range(max(len(a), len(b))):
        p = a[i] if i < len(a) else None
        n = b[i] if i < len(b) else None
        if p is None or n is None:
            out.append(n if p is None else p)
            continue
        pair = (id(p), id(n))
        if pair not in sums:
            sums[pair] = p + n
        out.append(sums[pair])
    return tuple(out)
