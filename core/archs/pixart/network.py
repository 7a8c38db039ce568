"""PixArt-Σ and PixArt-α: the PixArt-MS diffusion transformer (DiT with adaLN-single), keys in the
original (ComfyUI) layout: ``x_embedder.proj``, ``t_embedder.mlp``, ``t_block.1``, ``y_embedder.y_proj``,
``blocks.N.{attn.qkv, attn.proj, cross_attn.{q_linear, kv_linear, proj}, mlp.fc1/fc2,
scale_shift_table}``, ``final_layer.{linear, scale_shift_table}``.

Facts from ComfyUI's ``comfy/ldm/pixart`` and ``model_detection.py``: 16 heads (not stored in a
file; every released PixArt is XL-2, 1152 wide), a 2x2 patch embedding plus a sin-cos position
grid computed for the latent's size (its interpolation ``round(c / 64)`` and base size
``round(c / 64) * 64 / patch`` from the mean latent side ``c``, unless the file stores a
``pos_embed`` whose grid fixes the interpolation), the timestep's 256-wide embedding through an MLP
(``t``), one shared ``t_block`` projection to six modulation vectors per block, added to each
block's ``scale_shift_table``; self-attention, cross-attention to the projected T5 tokens (no mask)
and a tanh-GELU MLP; a final layer modulated by ``t``. The network predicts eps and a learned
variance; like ComfyUI it returns only the eps channels. PixArt-α adds size micro-conditions: the
picture's (height, width) and its aspect ratio height / width, each number's 256-wide timestep
embedding through an MLP (``csize_embedder``, ``ar_embedder``), added to ``t`` (ComfyUI passes the
picture's own size: the latent's x 8).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import attention, timestep_embedding
from core.models.flux import count_blocks, strip_prefix
from core.models.mmdit_blocks import Embedder, Mlp, PatchEmbed, SelfAttention
from core.models.patches import (
    NO_PATCHES,
    AttentionRoute,
    NetworkPatches,
    PatchPoints,
    Site,
    attend_heads,
    attention_route,
)
from core.ops.layers import OpSet, cast_to, default_ops

FREQUENCY_EMBEDDING_SIZE = 256
#: ComfyUI reads no head count from a PixArt file: every released one has 16 (72 channels each)
PIXART_HEADS = 16
#: the latent side the position grid's interpolation and base size are counted in (512 pixels / 8)
PE_UNIT = 64


@dataclass(frozen=True)
class PixArtConfig:
    hidden_size: int = 1152
    depth: int = 28
    num_heads: int = PIXART_HEADS
    patch_size: int = 2
    in_channels: int = 4
    learned_sigma: bool = True  # the final layer predicts eps and a variance (twice the channels)
    context_dim: int = 4096  # T5-XXL's width
    mlp_ratio: float = 4.0
    #: rows of the null-caption embedding a file keeps (``y_embedder.y_embedding``: 300 for PixArt-Σ,
    #: the T5 length it was trained at); None where the file has none (diffusers). Unused when sampling.
    caption_tokens: int | None = None
    #: rows of a stored ``pos_embed`` (its square grid fixes the interpolation, as ComfyUI reads it)
    pos_embed_tokens: int | None = None
    micro_condition: bool = False  # PixArt-α: size and aspect-ratio embeddings added to the timestep's

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ModelMismatchError(
                f"a PixArt transformer {self.hidden_size} wide cannot have {self.num_heads} heads",
                why="PixArt files do not store their head count; every released one has 16",
                fix="check that the file is a PixArt diffusion model",
            )

    @property
    def out_channels(self) -> int:
        """What the network returns: the eps channels (the latent's)."""
        return self.in_channels

    @property
    def final_channels(self) -> int:
        return self.in_channels * (2 if self.learned_sigma else 1)

    @property
    def pe_interpolation(self) -> float | None:
        if self.pos_embed_tokens is None:
            return None
        return float(math.isqrt(self.pos_embed_tokens) * self.patch_size // PE_UNIT)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> PixArtConfig:
        shapes = strip_prefix(shapes)
        needed = ("x_embedder.proj.weight", "t_block.1.weight", "y_embedder.y_proj.fc1.weight")
        missing = [k for k in (*needed, "final_layer.linear.weight") if k not in shapes]
        if missing:
            raise ModelMismatchError(
                "These tensors are not a PixArt transformer in the original layout",
                why=f"missing {missing}",
                fix="check that the file is a PixArt diffusion model",
            )
        hidden, in_channels, patch = (int(d) for d in shapes["x_embedder.proj.weight"][:3])
        final = int(shapes["final_layer.linear.weight"][0]) // (patch * patch)
        fc1 = shapes.get("blocks.0.mlp.fc1.weight")
        caption = shapes.get("y_embedder.y_embedding")
        pos = shapes.get("pos_embed")
        return cls(
            hidden_size=hidden,
            depth=count_blocks(shapes, "blocks."),
            patch_size=patch,
            in_channels=in_channels,
            learned_sigma=final == 2 * in_channels,
            context_dim=int(shapes["y_embedder.y_proj.fc1.weight"][1]),
            mlp_ratio=int(fc1[0]) / hidden if fc1 is not None else 4.0,
            caption_tokens=int(caption[0]) if caption is not None else None,
            pos_embed_tokens=int(pos[1]) if pos is not None else None,
            micro_condition="csize_embedder.mlp.0.weight" in shapes,
        )


def sincos_grid(
    dim: int, h: int, w: int, interpolation: float, base_size: int, device: torch.device | None = None
) -> torch.Tensor:
    """PixArt's 2-D sin-cos position embedding, (h*w, dim) in float32: half the channels encode the
    column, half the row, each ``[sin, cos]`` of ``position / (side / base_size) / interpolation``."""

    def one_axis(pos: torch.Tensor, channels: int) -> torch.Tensor:
        steps = torch.arange(channels // 2, dtype=torch.float32, device=device)
        omega = 1.0 / 10000 ** (steps / (channels / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

    rows = torch.arange(h, dtype=torch.float32, device=device) / (h / base_size) / interpolation
    cols = torch.arange(w, dtype=torch.float32, device=device) / (w / base_size) / interpolation
    grid_h, grid_w = torch.meshgrid(rows, cols, indexing="ij")
    return torch.cat([one_axis(grid_w, dim // 2), one_axis(grid_h, dim // 2)], dim=1)


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


class CrossAttention(nn.Module):
    """Image tokens attend to the caption tokens: ``q_linear``, fused ``kv_linear``, ``proj``."""

    def __init__(
        self, dim: int, heads: int, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ):
        super().__init__()
        self.heads = heads
        self.q_linear = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)
        self.kv_linear = ops.Linear(dim, 2 * dim, bias=True, device=device, dtype=dtype)
        self.proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, y: torch.Tensor, route: AttentionRoute | None = None) -> torch.Tensor:
        b, m, dim = y.shape
        k, v = self.kv_linear(y).view(b, m, 2, dim).unbind(2)
        if route is None:  # q a temporary, as before the patch points: freed before ``proj``
            out: torch.Tensor = self.proj(attention(self.q_linear(x), k, v, self.heads))
            return out
        patched: torch.Tensor = self.proj(route.attend(self.q_linear(x), k, v, self.heads, 0, "cross"))
        return patched


class PixArtBlock(nn.Module):
    def __init__(
        self, cfg: PixArtConfig, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        hidden = cfg.hidden_size
        self.attn = SelfAttention(
            hidden, cfg.num_heads, qk_norm=False, pre_only=False, ops=ops, device=device, dtype=dtype
        )
        self.cross_attn = CrossAttention(hidden, cfg.num_heads, ops=ops, device=device, dtype=dtype)
        self.mlp = Mlp(hidden, int(hidden * cfg.mlp_ratio), ops=ops, device=device, dtype=dtype)
        self.scale_shift_table = nn.Parameter(torch.empty(6, hidden, device=device, dtype=dtype))

    def _self_attention(
        self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, route: AttentionRoute | None
    ) -> torch.Tensor:
        """A function of its own so that q, k, v and the attention's output are freed on return
        (locals of :meth:`forward` would hold 4 rows per token through the MLP, the block's peak)."""
        q, k, v = self.attn.qkv_heads(_norm(x) * (1 + scale) + shift)
        return self.attn.out(attend_heads(route, q, k, v, 0, "self"))

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, t6: torch.Tensor, route: AttentionRoute | None = None
    ) -> torch.Tensor:
        """``route``: the attention patches of this block's site (its self- and cross-attention,
        layer 0 of each kind)."""
        table = cast_to(self.scale_shift_table, x)
        assert table is not None
        mods = (table[None] + t6.reshape(x.shape[0], 6, -1)).chunk(6, dim=1)  # each (B, 1, D)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods
        x = x + gate_msa * self._self_attention(x, shift_msa, scale_msa, route)
        x = x + self.cross_attn(x, y, route)
        mlp: torch.Tensor = self.mlp(_norm(x) * (1 + scale_mlp) + shift_mlp)
        return x + gate_mlp * mlp


class CaptionMlp(nn.Module):
    """``fc1`` (T5 width -> hidden), tanh GELU, ``fc2`` (hidden -> hidden)."""

    def __init__(
        self, cfg: PixArtConfig, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.fc1 = ops.Linear(cfg.context_dim, cfg.hidden_size, bias=True, device=device, dtype=dtype)
        self.fc2 = ops.Linear(cfg.hidden_size, cfg.hidden_size, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        return out


class CaptionProjection(nn.Module):
    """``y_proj`` projects the T5 tokens; ``y_embedding``: the learned null caption a file keeps
    from training (classifier-free dropout), kept only to load and save it."""

    y_embedding: torch.Tensor

    def __init__(
        self, cfg: PixArtConfig, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.y_proj = CaptionMlp(cfg, ops=ops, device=device, dtype=dtype)
        if cfg.caption_tokens is not None:
            shape = (cfg.caption_tokens, cfg.context_dim)
            self.register_buffer("y_embedding", torch.empty(shape, device=device, dtype=dtype))

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.y_proj(context)
        return out


class FinalLayer(nn.Module):
    def __init__(
        self, cfg: PixArtConfig, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        out = cfg.patch_size**2 * cfg.final_channels
        self.linear = ops.Linear(cfg.hidden_size, out, bias=True, device=device, dtype=dtype)
        self.scale_shift_table = nn.Parameter(torch.empty(2, cfg.hidden_size, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        table = cast_to(self.scale_shift_table, x)
        assert table is not None
        shift, scale = (table[None] + t[:, None]).chunk(2, dim=1)
        out: torch.Tensor = self.linear(_norm(x) * (1 + scale) + shift)
        return out


class PixArt(nn.Module):
    """``forward(x, timesteps, context)``: a latent (B, C, H, W), discrete timesteps (0..999) and T5
    tokens (B, L, context_dim) -> the predicted noise (B, C, H, W)."""

    pos_embed: torch.Tensor

    def __init__(
        self,
        config: PixArtConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        dev = torch.device(device) if device is not None else None
        hidden = config.hidden_size
        self.x_embedder = PatchEmbed(
            config.in_channels, hidden, config.patch_size, ops=ops, device=dev, dtype=dtype
        )
        if config.pos_embed_tokens is not None:  # kept to load and save it; the grid is recomputed
            self.register_buffer(
                "pos_embed", torch.empty(1, config.pos_embed_tokens, hidden, device=dev, dtype=dtype)
            )
        self.t_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.csize_embedder: Embedder | None = None
        self.ar_embedder: Embedder | None = None
        if config.micro_condition:
            third = hidden // 3
            self.csize_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, third, ops=ops, device=dev, dtype=dtype)
            self.ar_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, third, ops=ops, device=dev, dtype=dtype)
        self.t_block = nn.Sequential(
            nn.SiLU(), ops.Linear(hidden, 6 * hidden, bias=True, device=dev, dtype=dtype)
        )
        self.y_embedder = CaptionProjection(config, ops=ops, device=dev, dtype=dtype)
        self.blocks = nn.ModuleList(
            PixArtBlock(config, ops=ops, device=dev, dtype=dtype) for _ in range(config.depth)
        )
        self.final_layer = FinalLayer(config, ops=ops, device=dev, dtype=dtype)

    def position_grid(self, latent: tuple[int, int], h: int, w: int, like: torch.Tensor) -> torch.Tensor:
        """(1, h*w, hidden) for an (h, w) token grid, as ComfyUI computes it from the latent's size
        (in float32; a mean side under 32 latents, where ComfyUI's rounding gives 0 and divides by
        it, counts as one unit)."""
        p = self.config.patch_size
        units = max(round((latent[0] + latent[1]) // 2 / PE_UNIT), 1)
        interpolation = self.config.pe_interpolation or float(units)
        grid = sincos_grid(self.config.hidden_size, h, w, interpolation, units * PE_UNIT // p, like.device)
        return grid[None].to(dtype=like.dtype)

    def micro_conditions(self, height: int, width: int, like: torch.Tensor) -> torch.Tensor:
        """PixArt-α's (B, hidden) size conditioning for a latent of ``height`` x ``width``: the
        embeddings of 8 x height, 8 x width and height / width (each number made in ``like``'s
        dtype, as ComfyUI does), one ``hidden / 3`` block each."""
        assert self.csize_embedder is not None and self.ar_embedder is not None
        batch = like.shape[0]
        parts = []
        sizes = ((self.csize_embedder, [height * 8.0, width * 8.0]), (self.ar_embedder, [height / width]))
        for embedder, values in sizes:
            # filled on the device (a scalar fill): torch.tensor(values, device=) copies from the host
            numbers = torch.empty(batch, len(values), dtype=like.dtype, device=like.device)
            for i, value in enumerate(values):
                numbers[:, i] = value
            numbers = numbers.reshape(-1)  # (h, w, h, w, ...) per item, as ComfyUI's repeat
            freq = timestep_embedding(numbers, FREQUENCY_EMBEDDING_SIZE).to(like.dtype)
            parts.append(embedder(freq).reshape(batch, -1))
        return torch.cat(parts, dim=1)

    def patch_points(self) -> PatchPoints:
        """After each transformer block (the picture's tokens); each block's self-attention over
        the picture and cross-attention to the caption."""
        return PatchPoints({"block": len(self.blocks)}, attention=("self", "cross"))

    def forward(
        self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:  # fmt: skip
        """``patches``: block patches on the picture's tokens after each block, attention patches
        on each block's self- and cross-attention."""
        cfg = self.config
        p = cfg.patch_size
        batch, _, height, width = x.shape
        if context.ndim != 3:
            raise LoadoutError(
                "PixArt needs T5 tokens (batch, tokens, width)",
                why=f"got a context of shape {list(context.shape)}",
                fix="pass the encoded prompt as context",
                code="bad_input",
            )
        pad_h, pad_w = (-height) % p, (-width) % p
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="circular")
        h, w = (height + pad_h) // p, (width + pad_w) // p
        tokens = self.x_embedder(x)
        tokens = tokens + self.position_grid((height, width), h, w, tokens)
        t = self.t_embedder(timestep_embedding(timesteps, FREQUENCY_EMBEDDING_SIZE).to(tokens.dtype))
        if self.csize_embedder is not None and self.ar_embedder is not None:
            t = t + self.micro_conditions(height, width, tokens)
        t6 = self.t_block(t)
        y = self.y_embedder(context.to(tokens.dtype))
        for i, block in enumerate(self.blocks):
            tokens = block(tokens, y, t6, attention_route(patches, "block", i))
            tokens = patches.block(tokens, Site("block", i))
        out = self.final_layer(tokens, t)
        c = cfg.final_channels
        out = out.reshape(batch, h, w, p, p, c)
        out = torch.einsum("nhwpqc->nchpwq", out).reshape(batch, c, h * p, w * p)
        return out[:, : cfg.in_channels, :height, :width]
