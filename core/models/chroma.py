"""Chroma: the Flux transformer with per-block modulation layers pruned and replaced by one small
network (``distilled_guidance_layer``) that computes every block's shift/scale/gate vectors from
the timestep and a slot index. No CLIP pooled vector; keys in the original (BFL-style) layout.

Modulation slots, in order: 3 per single block, 6 per double block for image tokens, 6 per double
block for text tokens, then the final layer's shift and scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch
from torch import nn

from core.errors import ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux import count_blocks, joint_ids, rope_axes, strip_prefix
from core.models.flux_blocks import (
    DoubleStreamBlock,
    MLPEmbedder,
    Mod,
    ScaleRMSNorm,
    SingleStreamBlock,
    rope,
    stream_blocks,
)
from core.models.patches import NO_PATCHES, NetworkPatches, PatchPoints, Site, attention_route
from core.ops.layers import OpSet, default_ops


@dataclass(frozen=True)
class ChromaConfig:
    in_channels: int = 64
    out_channels: int = 64
    context_in_dim: int = 4096
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 19
    depth_single_blocks: int = 38
    axes_dim: tuple[int, ...] = (16, 56, 56)
    theta: int = 10_000
    qkv_bias: bool = True
    approximator_in_dim: int = 64
    approximator_hidden: int = 5120
    approximator_depth: int = 5

    @property
    def modulation_slots(self) -> int:
        return 3 * self.depth_single_blocks + 12 * self.depth + 2

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> ChromaConfig:
        shapes = strip_prefix(shapes)
        needed = ("img_in.weight", "txt_in.weight", "distilled_guidance_layer.in_proj.weight")
        missing = [k for k in needed if k not in shapes]
        if missing or "double_blocks.0.img_attn.qkv.weight" not in shapes:
            raise ModelMismatchError(
                "These tensors are not a Chroma transformer in the original layout",
                why=f"missing {missing or ['double_blocks.0.img_attn.qkv.weight']}",
                fix="check that the file is a Chroma diffusion model",
            )
        hidden, in_channels = (int(d) for d in shapes["img_in.weight"])
        head_dim = int(shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0])
        approx_hidden, approx_in = (int(d) for d in shapes["distilled_guidance_layer.in_proj.weight"])
        mlp = shapes.get("double_blocks.0.img_mlp.0.weight")
        return replace(
            cls(),
            in_channels=in_channels,
            out_channels=int(shapes["final_layer.linear.weight"][0]),
            context_in_dim=int(shapes["txt_in.weight"][1]),
            hidden_size=hidden,
            mlp_ratio=int(mlp[0]) / hidden if mlp is not None else 4.0,
            num_heads=hidden // head_dim,
            depth=count_blocks(shapes, "double_blocks."),
            depth_single_blocks=count_blocks(shapes, "single_blocks."),
            axes_dim=rope_axes(head_dim),
            qkv_bias="double_blocks.0.img_attn.qkv.bias" in shapes,
            approximator_in_dim=approx_in,
            approximator_hidden=approx_hidden,
            approximator_depth=count_blocks(shapes, "distilled_guidance_layer.layers."),
        )


class Approximator(nn.Module):
    """``in_proj`` -> depth x (x + MLP(RMSNorm(x))) -> ``out_proj``."""

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        depth: int,
        *,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.in_proj = ops.Linear(in_dim, hidden, bias=True, device=device, dtype=dtype)
        self.layers = nn.ModuleList(
            MLPEmbedder(hidden, hidden, ops=ops, device=device, dtype=dtype) for _ in range(depth)
        )
        self.norms = nn.ModuleList(ScaleRMSNorm(hidden, device=device, dtype=dtype) for _ in range(depth))
        self.out_proj = ops.Linear(hidden, out_dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.in_proj(x)
        for layer, norm in zip(self.layers, self.norms, strict=True):
            x = x + layer(norm(x))
        out: torch.Tensor = self.out_proj(x)
        return out


class Chroma(nn.Module):
    """``forward(img, img_ids, txt, txt_ids, timesteps, guidance=None, txt_mask=None)`` on packed
    tokens as for :class:`core.models.flux.Flux`; ``txt_mask`` (B, Lt) marks the text tokens to
    attend to (True) so T5 padding can be ignored."""

    def __init__(
        self,
        config: ChromaConfig,
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
        self.txt_in = ops.Linear(config.context_in_dim, hidden, bias=True, device=dev, dtype=dtype)
        self.distilled_guidance_layer = Approximator(
            config.approximator_in_dim,
            config.approximator_hidden,
            hidden,
            config.approximator_depth,
            ops=ops,
            device=dev,
            dtype=dtype,
        )
        self.double_blocks, self.single_blocks, self.final_layer = stream_blocks(
            config, modulation=False, ops=ops, device=dev, dtype=dtype
        )

    def modulation_vectors(
        self, timesteps: torch.Tensor, guidance: torch.Tensor | None, dtype: torch.dtype
    ) -> torch.Tensor:
        """All modulation slots, (B, slots, hidden)."""
        batch, slots = timesteps.shape[0], self.config.modulation_slots
        quarter = self.config.approximator_in_dim // 4
        if guidance is None:
            guidance = torch.zeros_like(timesteps, dtype=torch.float32)
        t = timestep_embedding(timesteps, quarter, time_factor=1000.0)
        g = timestep_embedding(guidance, quarter, time_factor=1000.0)
        index = torch.arange(slots, device=timesteps.device)
        idx = timestep_embedding(index, self.config.approximator_in_dim - 2 * quarter, time_factor=1000.0)
        vec = torch.cat(
            (torch.cat((t, g), dim=1)[:, None].expand(batch, slots, -1), idx[None].expand(batch, -1, -1)),
            dim=-1,
        )
        out: torch.Tensor = self.distilled_guidance_layer(vec.to(dtype))
        return out

    def patch_points(self) -> PatchPoints:
        """After each double block (the picture's tokens) and each single block (text + picture);
        each block's joint attention (layer 0 of its site, masked by the text mask when given)."""
        stages = {"double": len(self.double_blocks), "single": len(self.single_blocks)}
        return PatchPoints(stages, attention=("joint",))

    def forward(
        self,
        img: torch.Tensor,
        img_ids: torch.Tensor,
        txt: torch.Tensor,
        txt_ids: torch.Tensor,
        timesteps: torch.Tensor,
        guidance: torch.Tensor | None = None,
        txt_mask: torch.Tensor | None = None,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        """``patches``: as Flux's (:meth:`patch_points`)."""
        cfg = self.config
        x = self.img_in(img)
        mods = self.modulation_vectors(timesteps, guidance, img.dtype)
        ctx = self.txt_in(txt.to(img.dtype))
        pe = rope(joint_ids(txt_ids, img_ids, img.shape[0]), cfg.axes_dim, cfg.theta)
        mask = None
        if txt_mask is not None:
            keep_img = torch.ones(img.shape[0], img.shape[1], dtype=torch.bool, device=img.device)
            mask = torch.cat((txt_mask.to(device=img.device, dtype=torch.bool), keep_img), dim=1)[
                :, None, None
            ]

        def slot(offset: int) -> Mod:
            return Mod(
                mods[:, offset : offset + 1],
                mods[:, offset + 1 : offset + 2],
                mods[:, offset + 2 : offset + 3],
            )

        img_base = 3 * cfg.depth_single_blocks
        txt_base = img_base + 6 * cfg.depth
        for i, double in enumerate(cast(Sequence[DoubleStreamBlock], self.double_blocks)):
            o_img, o_txt = img_base + 6 * i, txt_base + 6 * i
            block_mods = (slot(o_img), slot(o_img + 3), slot(o_txt), slot(o_txt + 3))
            x, ctx = double(x, ctx, pe, block_mods, mask, attention_route(patches, "double", i))
            x = patches.block(x, Site("double", i))
        tokens = torch.cat((ctx, x), dim=1)
        for i, single in enumerate(cast(Sequence[SingleStreamBlock], self.single_blocks)):
            tokens = single(tokens, pe, slot(3 * i), mask, attention_route(patches, "single", i))
            tokens = patches.block(tokens, Site("single", i))
        out: torch.Tensor = self.final_layer(tokens[:, ctx.shape[1] :], mods[:, -2:-1], mods[:, -1:])
        return out
