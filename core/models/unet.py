"""The Stable Diffusion UNet: SD1.x, SD2.x, SDXL, SDXL-refiner, SSD-1B and Segmind Vega, with
inpaint (9-channel) and instruct-pix2pix (8-channel) inputs, from one :class:`UNetConfig`.

State-dict keys are exactly the original layout once ``model.diffusion_model.`` is stripped:
``input_blocks.0.0.weight``, ``time_embed.0.weight``, ``label_emb.0.0.weight``,
``middle_block.1.transformer_blocks.0.attn1.to_q.weight``, ``out.2.weight`` ...

Every layer comes from an :class:`~core.ops.layers.OpSet`: nothing is randomly initialised, so
building on the meta device is cheap, and weights are cast to the input's dtype and device at
forward. Computation runs in ``x``'s dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from core.errors import ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.patches import NO_PATCHES, AttentionRoute, NetworkPatches, PatchPoints, Site
from core.models.unet_blocks import (
    Downsample,
    LayerFactory,
    ResBlock,
    SpatialTransformer,
    UNetBlock,
    Upsample,
)
from core.models.unet_config import DownStage, ResStage, UNetConfig
from core.ops.layers import OpSet, default_ops

__all__ = ["DownStage", "ResStage", "UNetConfig", "UNetModel"]


def _transformer(f: LayerFactory, cfg: UNetConfig, channels: int, depth: int) -> SpatialTransformer:
    assert cfg.context_dim is not None  # UNetConfig validates this
    heads, head_dim = cfg.heads(channels)
    return SpatialTransformer(
        f, channels, heads, head_dim, depth, cfg.context_dim, cfg.use_linear_in_transformer
    )


def res_block(f: LayerFactory, cfg: UNetConfig, stage: ResStage) -> UNetBlock:
    """One ResBlock stage with its transformer and upsampler (input or output side)."""
    layers: list[nn.Module] = [ResBlock(f, stage.in_channels, stage.out_channels, cfg.time_embed_dim)]
    if stage.transformer_depth:
        layers.append(_transformer(f, cfg, stage.out_channels, stage.transformer_depth))
    if stage.upsample:
        layers.append(Upsample(f, stage.out_channels))
    return UNetBlock(*layers)


def input_side(
    f: LayerFactory, config: UNetConfig
) -> tuple[nn.Sequential, nn.Sequential | None, nn.ModuleList, UNetBlock]:
    """The time embedding, label embedding, input blocks and middle block: what a UNet and the
    ControlNets built on it share (same keys, same shapes)."""
    mc, ted = config.model_channels, config.time_embed_dim
    time_embed = nn.Sequential(f.linear(mc, ted), nn.SiLU(), f.linear(ted, ted))
    label_emb: nn.Sequential | None = None
    if config.adm_in_channels is not None:
        mlp = nn.Sequential(f.linear(config.adm_in_channels, ted), nn.SiLU(), f.linear(ted, ted))
        label_emb = nn.Sequential(mlp)
    input_blocks = nn.ModuleList([UNetBlock(f.conv(config.in_channels, mc, 3, padding=1))])
    for stage in config.input_stages():
        if isinstance(stage, DownStage):
            input_blocks.append(UNetBlock(Downsample(f, stage.channels)))
        else:
            input_blocks.append(res_block(f, config, stage))
    mid = config.middle_channels
    middle: list[nn.Module] = [ResBlock(f, mid, mid, ted)]
    if config.transformer_depth_middle is not None:
        middle.append(_transformer(f, config, mid, config.transformer_depth_middle))
        middle.append(ResBlock(f, mid, mid, ted))
    return time_embed, label_emb, input_blocks, UNetBlock(*middle)


class UNetModel(nn.Module):
    """``forward(x, timesteps, context, y=None)`` -> the model output (eps or v) shaped like ``x``
    with ``out_channels`` channels."""

    def __init__(
        self,
        config: UNetConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        f = LayerFactory(ops, device, dtype)
        self.time_embed, self.label_emb, self.input_blocks, self.middle_block = input_side(f, config)
        self.output_blocks = nn.ModuleList(res_block(f, config, s) for s in config.output_stages())
        mc = config.model_channels
        self.out = nn.Sequential(f.group_norm(mc), nn.SiLU(), f.conv(mc, config.out_channels, 3, padding=1))

    def patch_points(self) -> PatchPoints:
        """After each input, middle and output block; after each input block's skip connection was
        taken (``input_after_skip``: ComfyUI's ``input_block_patch_after_skip``, what the next block
        gets without changing the skip); the skip connections where the output side takes them;
        self- and cross-attention of every transformer block."""
        n = len(self.input_blocks)
        blocks = {"input": n, "input_after_skip": n, "middle": 1, "output": len(self.output_blocks)}
        return PatchPoints(blocks, joins=len(self.input_blocks), attention=("self", "cross"))

    def forward(
        self,
        x: torch.Tensor,
        timesteps: torch.Tensor,
        context: torch.Tensor | None = None,
        y: torch.Tensor | None = None,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        """x: (B, in_channels, H, W) latents; timesteps: (B,) or scalar; context: (B, L, context_dim);
        y: (B, adm_in_channels), SDXL's pooled text embedding + size/crop embeddings; patches: what
        features change at the points of :meth:`patch_points`."""
        dtype = x.dtype
        t = timesteps.reshape(-1).to(x.device)
        if t.shape[0] != x.shape[0]:
            t = t.expand(x.shape[0])
        emb: torch.Tensor = self.time_embed(timestep_embedding(t, self.config.model_channels).to(dtype))
        if self.label_emb is not None:
            if y is None:
                raise ModelMismatchError(
                    "This UNet needs the 'y' vector (SDXL-style size and pooled-text conditioning)",
                    why=f"it embeds a {self.config.adm_in_channels}-wide vector with its timestep",
                    fix="pass y, or use the conditioning of the model's own family",
                )
            emb = emb + self.label_emb(y.to(dtype))
        if context is not None:
            context = context.to(dtype)
        elif self.config.has_transformers:
            raise ValueError("this UNet has cross-attention: forward() needs a context tensor")
        routed = patches.patches_attention

        def route(stage: str, index: int) -> AttentionRoute | None:
            return AttentionRoute(patches, Site(stage, index)) if routed else None

        skips: list[torch.Tensor] = []
        h = x
        for i, block in enumerate(self.input_blocks):
            h = block(h, emb, context, None, route("input", i))
            h = patches.block(h, Site("input", i))
            skips.append(h)
            h = patches.block(h, Site("input_after_skip", i))
        h = self.middle_block(h, emb, context, None, route("middle", 0))
        h = patches.block(h, Site("middle", 0))
        for j, block in enumerate(self.output_blocks):
            skip = skips.pop()
            h, skip = patches.join(h, skip, Site("skip", len(skips)))
            h = torch.cat([h, skip], dim=1)
            size = (skips[-1].shape[-2], skips[-1].shape[-1]) if skips else None
            h = block(h, emb, context, size, route("output", j))
            h = patches.block(h, Site("output", j))
        out: torch.Tensor = self.out(h)
        return out
