"""The MMDiT of Stable Diffusion 3 / 3.5, with state-dict keys in the original release layout
(``joint_blocks.N.context_block.attn.qkv.weight``, ``x_embedder.proj``, ``pos_embed``, ...; the
keys of a checkpoint after stripping ``model.diffusion_model.``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.mmdit_blocks import Embedder, FinalLayer, JointBlock, PatchEmbed
from core.models.patches import (
    NO_PATCHES,
    AttentionKind,
    NetworkPatches,
    PatchPoints,
    Site,
    attention_route,
)
from core.ops.layers import OpSet, default_ops

CHECKPOINT_PREFIX = "model.diffusion_model."
FREQUENCY_EMBEDDING_SIZE = 256


@dataclass(frozen=True)
class MMDiTConfig:
    """Shape of one MMDiT. ``num_heads`` 0 means ``depth`` (the released models use
    hidden size = 64 * depth, one 64-wide head per layer)."""

    depth: int
    num_heads: int = 0
    head_dim: int = 64
    patch_size: int = 2
    in_channels: int = 16
    out_channels: int = 16
    pos_embed_max_size: int = 192
    context_dim: int | None = 4096
    adm_in_channels: int | None = 2048
    mlp_ratio: float = 4.0
    qk_norm: Literal["rms"] | None = None
    dual_attention_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_heads == 0:
            object.__setattr__(self, "num_heads", self.depth)
        object.__setattr__(self, "dual_attention_layers", tuple(sorted(set(self.dual_attention_layers))))
        if self.depth < 1 or self.num_heads < 1 or self.head_dim < 1:
            raise ValueError(f"MMDiTConfig needs positive depth, heads and head_dim, got {self}")
        bad = [i for i in self.dual_attention_layers if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"dual_attention_layers {bad} are outside 0..{self.depth - 1}")

    @property
    def hidden_size(self) -> int:
        return self.num_heads * self.head_dim

    @classmethod
    def sd3_medium(cls) -> MMDiTConfig:
        return cls(depth=24, pos_embed_max_size=192)

    @classmethod
    def sd35_medium(cls) -> MMDiTConfig:
        return cls(depth=24, pos_embed_max_size=384, qk_norm="rms", dual_attention_layers=tuple(range(13)))

    @classmethod
    def sd35_large(cls) -> MMDiTConfig:
        return cls(depth=38, pos_embed_max_size=192, qk_norm="rms")

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> MMDiTConfig:
        """The config of a state dict in the original layout, from its tensor shapes alone.

        Keys may still carry the ``model.diffusion_model.`` prefix of a full checkpoint.
        """
        if any(k.startswith(CHECKPOINT_PREFIX) for k in shapes):
            shapes = {
                k[len(CHECKPOINT_PREFIX) :]: v for k, v in shapes.items() if k.startswith(CHECKPOINT_PREFIX)
            }
        required = ("x_embedder.proj.weight", "pos_embed", "final_layer.linear.weight")
        missing = [k for k in required if k not in shapes]
        if missing or "joint_blocks.0.x_block.attn.qkv.weight" not in shapes:
            raise ModelMismatchError(
                "These tensors are not an SD3 MMDiT in the original layout",
                why=f"missing {missing or ['joint_blocks.0.x_block.attn.qkv.weight']}",
                fix="check that the file is an SD3/SD3.5 diffusion model (diffusers files need conversion)",
            )
        hidden, in_channels, patch, _ = shapes["x_embedder.proj.weight"]
        blocks = {int(m.group(1)) for k in shapes if (m := re.match(r"joint_blocks\.(\d+)\.", k))}
        dual = tuple(i for i in sorted(blocks) if f"joint_blocks.{i}.x_block.attn2.qkv.weight" in shapes)
        ln_q = shapes.get("joint_blocks.0.x_block.attn.ln_q.weight")
        head_dim = int(ln_q[0]) if ln_q is not None else 64
        num_patches = int(shapes["pos_embed"][1])
        max_size = math.isqrt(num_patches)
        if max_size * max_size != num_patches:
            raise ModelMismatchError(
                "The SD3 position embedding is not square",
                why=f"pos_embed has {num_patches} positions",
                fix="this file is not a supported MMDiT",
            )
        context = shapes.get("context_embedder.weight")
        adm = shapes.get("y_embedder.mlp.0.weight")
        fc1 = shapes.get("joint_blocks.0.x_block.mlp.fc1.weight")
        return cls(
            depth=max(blocks) + 1,
            num_heads=int(hidden) // head_dim,
            head_dim=head_dim,
            patch_size=int(patch),
            in_channels=int(in_channels),
            out_channels=int(shapes["final_layer.linear.weight"][0]) // (int(patch) * int(patch)),
            pos_embed_max_size=max_size,
            context_dim=int(context[1]) if context is not None else None,
            adm_in_channels=int(adm[1]) if adm is not None else None,
            mlp_ratio=int(fc1[0]) / int(hidden) if fc1 is not None else 4.0,
            qk_norm="rms" if ln_q is not None else None,
            dual_attention_layers=dual,
        )


def cropped_pos_embed(
    table: torch.Tensor, config: MMDiTConfig, h: int, w: int, like: torch.Tensor
) -> torch.Tensor:
    """The centre (h, w) window of a (1, max*max, hidden) position table, as (1, h*w, hidden) in
    ``like``'s device and dtype; refused in words past the table."""
    size = config.pos_embed_max_size
    if h > size or w > size:
        p = config.patch_size
        raise LoadoutError(
            f"The latent is too large for this model ({h * p}x{w * p} latent pixels)",
            why=f"its position embedding covers at most {size * p}x{size * p}",
            fix="generate at a smaller size, or upscale afterwards",
            code="unsupported_size",
        )
    top, left = (size - h) // 2, (size - w) // 2
    grid = table.view(1, size, size, -1)[:, top : top + h, left : left + w, :]
    return grid.reshape(1, h * w, -1).to(device=like.device, dtype=like.dtype)


class MMDiT(nn.Module):
    """SD3 / SD3.5 diffusion transformer. ``forward(x, timesteps, context, y)`` takes a latent
    (B, C, H, W), timesteps on the 0..1000 scale (sigma * 1000), T5/CLIP context (B, L, context_dim)
    and pooled CLIP vectors (B, adm_in_channels); it returns (B, out_channels, H, W)."""

    pos_embed: torch.Tensor

    def __init__(
        self,
        config: MMDiTConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        dev = torch.device(device) if device is not None else None
        hidden = config.hidden_size
        p = config.patch_size
        self.x_embedder = PatchEmbed(config.in_channels, hidden, p, ops=ops, device=dev, dtype=dtype)
        self.register_buffer(
            "pos_embed", torch.empty(1, config.pos_embed_max_size**2, hidden, device=dev, dtype=dtype)
        )
        self.t_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.y_embedder: Embedder | None = None
        if config.adm_in_channels is not None:
            self.y_embedder = Embedder(config.adm_in_channels, hidden, ops=ops, device=dev, dtype=dtype)
        self.context_embedder: nn.Module | None = None
        if config.context_dim is not None:
            self.context_embedder = ops.Linear(config.context_dim, hidden, bias=True, device=dev, dtype=dtype)
        self.joint_blocks = nn.ModuleList(
            JointBlock(
                hidden,
                config.num_heads,
                config.mlp_ratio,
                qk_norm=config.qk_norm == "rms",
                pre_only=i == config.depth - 1,
                dual_attention=i in config.dual_attention_layers,
                ops=ops,
                device=dev,
                dtype=dtype,
            )
            for i in range(config.depth)
        )
        self.final_layer = FinalLayer(hidden, p * p * config.out_channels, ops=ops, device=dev, dtype=dtype)

    def cropped_pos_embed(self, h: int, w: int, like: torch.Tensor) -> torch.Tensor:
        """The centre (h, w) window of the (max, max) position grid, as (1, h*w, hidden)."""
        return cropped_pos_embed(self.pos_embed, self.config, h, w, like)

    def patch_points(self) -> PatchPoints:
        """After each joint block (the picture's tokens); any joint block can be left out (its
        text and picture tokens passed on unchanged, ComfyUI's ``("double_block", i)``); each
        block's joint attention (layer 0) and SD3.5 medium's picture-only self-attention (layer 1)."""
        kinds: tuple[AttentionKind, ...] = (
            ("joint", "self") if self.config.dual_attention_layers else ("joint",)
        )
        return PatchPoints({"joint": len(self.joint_blocks)}, attention=kinds, skips=("joint",))

    def forward(
        self,
        x: torch.Tensor,
        timesteps: torch.Tensor,
        context: torch.Tensor | None,
        y: torch.Tensor | None = None,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        """``patches``: block patches on the picture's tokens after each joint block; the joint
        blocks whose sites it skips are left out."""
        cfg = self.config
        p = cfg.patch_size
        batch, _, height, width = x.shape
        pad_h, pad_w = (-height) % p, (-width) % p
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="circular")
        h, w = (height + pad_h) // p, (width + pad_w) // p

        tokens = self.x_embedder(x)
        tokens = tokens + self.cropped_pos_embed(h, w, tokens)
        c = self.t_embedder(timestep_embedding(timesteps, FREQUENCY_EMBEDDING_SIZE).to(tokens.dtype))
        if self.y_embedder is not None:
            if y is None:
                raise LoadoutError(
                    "This MMDiT needs pooled text vectors (y)",
                    fix="pass the pooled CLIP output",
                    code="bad_input",
                )
            c = c + self.y_embedder(y.to(tokens.dtype))
        if context is None:
            raise LoadoutError(
                "This MMDiT needs text context", fix="pass the encoded prompt as context", code="bad_input"
            )
        ctx: torch.Tensor | None = context.to(tokens.dtype)
        if self.context_embedder is not None:
            ctx = self.context_embedder(ctx)

        for i, block in enumerate(self.joint_blocks):
            assert ctx is not None
            if Site("joint", i) not in patches.skip:
                ctx, tokens = block(ctx, tokens, c, attention_route(patches, "joint", i))
            tokens = patches.block(tokens, Site("joint", i))

        out = self.final_layer(tokens, c)
        out = out.reshape(batch, h, w, p, p, cfg.out_channels)
        out = torch.einsum("nhwpqc->nchpwq", out).reshape(batch, cfg.out_channels, h * p, w * p)
        return out[:, :, :height, :width]
