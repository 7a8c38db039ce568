"""The Flux.1 transformer (dev, schnell, fill, depth/canny) with state-dict keys in Black Forest
Labs' layout (``double_blocks.N.img_attn.qkv.weight``, ``single_blocks.N.linear1``, ``img_in``,
``time_in``, ``vector_in``, ``guidance_in``, ``txt_in``, ``final_layer``), plus helpers that pack a
(B, 16, H, W) latent into 2x2-patch tokens and build their position ids."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux_blocks import DoubleStreamBlock, MLPEmbedder, SingleStreamBlock, rope, stream_blocks
from core.models.patches import NO_PATCHES, NetworkPatches, PatchPoints, Site, attention_route
from core.ops.layers import OpSet, default_ops

CHECKPOINT_PREFIX = "model.diffusion_model."
TIME_EMBEDDING_SIZE = 256
PATCH = 2


def strip_prefix(shapes: Mapping[str, Sequence[int]]) -> Mapping[str, Sequence[int]]:
    """Drop a full checkpoint's ``model.diffusion_model.`` prefix (other components go too)."""
    if any(k.startswith(CHECKPOINT_PREFIX) for k in shapes):
        n = len(CHECKPOINT_PREFIX)
        return {k[n:]: v for k, v in shapes.items() if k.startswith(CHECKPOINT_PREFIX)}
    return shapes


def count_blocks(shapes: Mapping[str, Sequence[int]], prefix: str) -> int:
    found = {int(m.group(1)) for k in shapes if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
    return max(found) + 1 if found else 0


def rope_axes(head_dim: int) -> tuple[int, int, int]:
    """Channels per id axis: Flux's (16, 56, 56) for 128-wide heads (the split is not stored in a
    file); otherwise even thirds with the remainder on the index axis."""
    if head_dim == 128:
        return (16, 56, 56)
    third = head_dim // 3 // 2 * 2
    return (head_dim - 2 * third, third, third)


@dataclass(frozen=True)
class FluxConfig:
    in_channels: int = 64
    out_channels: int = 64
    vec_in_dim: int = 768
    context_in_dim: int = 4096
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 19
    depth_single_blocks: int = 38
    axes_dim: tuple[int, ...] = (16, 56, 56)
    theta: int = 10_000
    qkv_bias: bool = True
    guidance_embed: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}"
            )
        if sum(self.axes_dim) != self.hidden_size // self.num_heads:
            raise ValueError(f"axes_dim {self.axes_dim} must add up to the head size")

    @classmethod
    def dev(cls) -> FluxConfig:
        return cls()

    @classmethod
    def schnell(cls) -> FluxConfig:
        return cls(guidance_embed=False)

    @classmethod
    def fill(cls) -> FluxConfig:
        """Inpainting/outpainting: 64 latent + 64 masked-image + 256 mask channels in."""
        return cls(in_channels=384)

    @classmethod
    def depth_control(cls) -> FluxConfig:
        """Flux depth and canny (structural conditioning): 64 latent + 64 control channels in."""
        return cls(in_channels=128)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> FluxConfig:
        """The config of a BFL-layout state dict from its tensor shapes alone."""
        shapes = strip_prefix(shapes)
        needed = ("img_in.weight", "txt_in.weight", "vector_in.in_layer.weight", "final_layer.linear.weight")
        missing = [k for k in needed if k not in shapes]
        if missing or "double_blocks.0.img_attn.qkv.weight" not in shapes:
            raise ModelMismatchError(
                "These tensors are not a Flux transformer in Black Forest Labs' layout",
                why=f"missing {missing or ['double_blocks.0.img_attn.qkv.weight']}",
                fix="check that the file is a Flux diffusion model (diffusers files need conversion)",
            )
        hidden, in_channels = (int(d) for d in shapes["img_in.weight"])
        head_dim = int(shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0])
        mlp = shapes.get("double_blocks.0.img_mlp.0.weight")
        return replace(
            cls(),
            in_channels=in_channels,
            out_channels=int(shapes["final_layer.linear.weight"][0]),
            vec_in_dim=int(shapes["vector_in.in_layer.weight"][1]),
            context_in_dim=int(shapes["txt_in.weight"][1]),
            hidden_size=hidden,
            mlp_ratio=int(mlp[0]) / hidden if mlp is not None else 4.0,
            num_heads=hidden // head_dim,
            depth=count_blocks(shapes, "double_blocks."),
            depth_single_blocks=count_blocks(shapes, "single_blocks."),
            axes_dim=rope_axes(head_dim),
            qkv_bias="double_blocks.0.img_attn.qkv.bias" in shapes,
            guidance_embed="guidance_in.in_layer.weight" in shapes,
        )


class Flux(nn.Module):
    """``forward(img, img_ids, txt, txt_ids, timesteps, y, guidance)`` on packed tokens:
    img (B, L, in_channels) with ids (B, L, 3) or (L, 3), T5 txt (B, Lt, 4096) with ids, timesteps
    in 0..1 (sigma), pooled CLIP y (B, 768), guidance scale (B,) for guidance-distilled models.
    Returns (B, L, out_channels)."""

    def __init__(
        self,
        config: FluxConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        dev = torch.device(device) if device is not None else None
        hidden = config.hidden_size
        self.img_in = ops.Linear(config.in_channels, hidden, bias=True, device=dev, dtype=dtype)
        self.time_in = MLPEmbedder(TIME_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.vector_in = MLPEmbedder(config.vec_in_dim, hidden, ops=ops, device=dev, dtype=dtype)
        self.guidance_in: MLPEmbedder | None = None
        if config.guidance_embed:
            self.guidance_in = MLPEmbedder(TIME_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.txt_in = ops.Linear(config.context_in_dim, hidden, bias=True, device=dev, dtype=dtype)
        self.double_blocks, self.single_blocks, self.final_layer = stream_blocks(
            config, modulation=True, ops=ops, device=dev, dtype=dtype
        )

    def patch_points(self) -> PatchPoints:
        """After each double block (the picture's tokens) and each single block (text + picture);
        any double or single block can be left out (ComfyUI's ``double_block``/``single_block``);
        each block's joint attention over [text, picture] tokens (layer 0 of its site, q and k
        after the rotary embedding)."""
        stages = {"double": len(self.double_blocks), "single": len(self.single_blocks)}
        return PatchPoints(stages, attention=("joint",), skips=("double", "single"))

    def forward(
        self,
        img: torch.Tensor,
        img_ids: torch.Tensor,
        txt: torch.Tensor,
        txt_ids: torch.Tensor,
        timesteps: torch.Tensor,
        y: torch.Tensor,
        guidance: torch.Tensor | None = None,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        """``patches``: block patches on the picture's tokens after each double block and on the
        joint stream after each single block; attention patches on each block's joint attention."""
        dtype = img.dtype
        x = self.img_in(img)
        vec = self.time_in(timestep_embedding(timesteps, TIME_EMBEDDING_SIZE, time_factor=1000.0).to(dtype))
        if self.guidance_in is not None:
            if guidance is None:
                raise LoadoutError(
                    "This Flux model is guidance-distilled and needs a guidance value",
                    fix="pass guidance (3.5 is the usual default for Flux dev)",
                    code="bad_input",
                )
            g = timestep_embedding(guidance, TIME_EMBEDDING_SIZE, time_factor=1000.0).to(dtype)
            vec = vec + self.guidance_in(g)
        vec = vec + self.vector_in(y.to(dtype))
        ctx = self.txt_in(txt.to(dtype))
        pe = rope(joint_ids(txt_ids, img_ids, img.shape[0]), self.config.axes_dim, self.config.theta)

        for i, double in enumerate(cast(Sequence[DoubleStreamBlock], self.double_blocks)):
            if Site("double", i) not in patches.skip:
                route = attention_route(patches, "double", i)
                x, ctx = double(x, ctx, pe, double.modulations(vec), None, route)
            x = patches.block(x, Site("double", i))
        tokens = torch.cat((ctx, x), dim=1)
        for i, single in enumerate(cast(Sequence[SingleStreamBlock], self.single_blocks)):
            if Site("single", i) not in patches.skip:
                route = attention_route(patches, "single", i)
                tokens = single(tokens, pe, single.modulations(vec), None, route)
            tokens = patches.block(tokens, Site("single", i))
        x = tokens[:, ctx.shape[1] :]
        shift, scale = self.final_layer.shift_scale(vec)
        out: torch.Tensor = self.final_layer(x, shift, scale)
        return out


def joint_ids(txt_ids: torch.Tensor, img_ids: torch.Tensor, batch: int) -> torch.Tensor:
    """[text ids, image ids] along the sequence, batched as (B, Lt + L, n_axes)."""
    txt_ids = txt_ids if txt_ids.ndim == 3 else txt_ids.unsqueeze(0)
    img_ids = img_ids if img_ids.ndim == 3 else img_ids.unsqueeze(0)
    txt_ids = txt_ids.expand(batch, -1, -1)
    img_ids = img_ids.expand(batch, -1, -1).to(txt_ids.device)
    return torch.cat((txt_ids, img_ids), dim=1)


def pack_latents(latent: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, ceil(H/2) * ceil(W/2), 4C) tokens, channels ordered (c, row, col) per 2x2
    patch. An odd side is padded circularly (:func:`unpack_latents` crops it again)."""
    b, c, h, w = latent.shape
    pad_h, pad_w = h % PATCH, w % PATCH
    if pad_h or pad_w:
        latent = F.pad(latent, (0, pad_w, 0, pad_h), mode="circular")
    hp, wp = (h + pad_h) // PATCH, (w + pad_w) // PATCH
    x = latent.reshape(b, c, hp, PATCH, wp, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, hp * wp, c * PATCH * PATCH)


def unpack_latents(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`pack_latents` for a latent of ``height`` x ``width``."""
    b, length, channels = tokens.shape
    hp, wp = -(-height // PATCH), -(-width // PATCH)
    if length != hp * wp:
        raise ValueError(f"{length} tokens do not make a {height}x{width} latent ({hp * wp} expected)")
    c = channels // (PATCH * PATCH)
    x = tokens.reshape(b, hp, wp, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, hp * PATCH, wp * PATCH)[:, :, :height, :width]


def make_img_ids(
    batch: int,
    height: int,
    width: int,
    *,
    index: int = 0,
    offset: tuple[int, int] = (0, 0),
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Position ids (B, ceil(H/2) * ceil(W/2), 3) = (index, row, column) of each packed token of a
    ``height`` x ``width`` latent; ``index`` tells reference images (Kontext) apart and ``offset``
    (rows, columns, in tokens) places one beside another."""
    hp, wp = -(-height // PATCH), -(-width // PATCH)
    rows = offset[0] + torch.arange(hp, device=device, dtype=dtype)[:, None].expand(hp, wp)
    cols = offset[1] + torch.arange(wp, device=device, dtype=dtype)[None, :].expand(hp, wp)
    ids = torch.stack((torch.full_like(rows, index), rows, cols), dim=-1).reshape(1, hp * wp, 3)
    return ids.expand(batch, -1, -1).clone()


def make_txt_ids(
    batch: int, length: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Text tokens all sit at position (0, 0, 0)."""
    return torch.zeros(batch, length, 3, device=device, dtype=dtype)


def reference_tokens(
    references: Sequence[torch.Tensor], batch: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference latents (Kontext) as more tokens and their ids, ComfyUI's default "offset" method:
    every reference at index 1, each placed after the ones before it along the side that keeps the
    whole arrangement squarer (a reference taller than wide goes to the right, else below), the
    offsets counted in latent pixels and rounded to tokens as ComfyUI's ``process_img`` does."""
    tokens, ids = [], []
    h = w = 0
    for ref in references:
        rh, rw = ref.shape[-2], ref.shape[-1]
        row = col = 0
        if rh + h > rw + w:
            col = w
        else:
            row = h
        h, w = max(h, rh + row), max(w, rw + col)
        tokens.append(pack_latents(ref.to(dtype)))
        place = ((row + PATCH // 2) // PATCH, (col + PATCH // 2) // PATCH)
        ids.append(make_img_ids(batch, rh, rw, index=1, offset=place, device=ref.device))
    return torch.cat(tokens, dim=1), torch.cat(ids, dim=1)
