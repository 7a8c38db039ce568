"""The SD3 / SD3.5 ControlNets, as ComfyUI computes them; both take a latent-space hint.

* :class:`JointControlNet`: diffusers' ``SD3ControlNetModel`` with joint blocks (InstantX's SD3
  Medium ControlNets, alimama's inpainting one): the MMDiT's first blocks, their own patch,
  position, timestep, pooled and context embedders, plus ``pos_embed_input`` (the hint latent's
  patch embedding) and one ``controlnet_blocks`` linear per block (ComfyUI's ``cldm/mmdit.py``).
  The pooled vector is replaced by zeros and the hint latent is scaled without SD3's shift (both
  "SD3 ControlNet weirdness" in ComfyUI, ``force_zeros_for_pooled_projection`` in diffusers).
  Block ``i``'s output is repeated ``depth // blocks`` times (``depth`` = width / 64, the base
  model's depth), once less for the last block.
* :class:`SD35ControlNet`: Stability's SD3.5 Large ControlNets (blur, canny, depth; ComfyUI's
  ``cldm/dit_embedder.py``): picture-only DiT blocks over the latent embedded by the *base*
  network's ``x_embedder`` (not in the file) plus a sin-cos grid, a timestep and pooled-text
  embedding, ``pos_embed_input``; each block feeds the next and its output is repeated
  ``ceil(depth / blocks)`` times. Canny hints are scaled (``x * 127.5 + 0.5``) and depth hints
  inverted before the VAE, as ComfyUI's ``load_controlnet_sd35`` does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.archs.control import ControlInput, HintSpace
from core.archs.mmdit.control_output import JointResiduals, residual_bytes
from core.detect.spec import LatentFormat
from core.errors import ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.mmdit import FREQUENCY_EMBEDDING_SIZE, MMDiTConfig, cropped_pos_embed
from core.models.mmdit_blocks import DismantledBlock, Embedder, JointBlock, PatchEmbed, modulate
from core.models.patches import PatchPoints, attend_heads
from core.ops.layers import OpSet, default_ops

#: Stability's ``control_type`` values (blur 0, canny 1, depth 2)
CANNY, DEPTH = 1, 2


def joint_counts(hidden: int, blocks: int) -> list[int]:
    """How often each of ``blocks`` joint ControlNet blocks' outputs repeats (ComfyUI's
    ``cldm/mmdit.py``: ``depth // blocks`` each, ``depth`` = hidden / 64, one less for the last)."""
    count = (hidden // 64) // blocks
    return [count] * (blocks - 1) + [count - 1]


def sd35_counts(hidden: int, blocks: int) -> list[int]:
    """ComfyUI's ``ControlNetEmbedder``: ``ceil(depth / blocks)`` each (the last block too)."""
    return [math.ceil((hidden // 64) / blocks)] * blocks


def sincos_grid(dim: int, w: int, h: int, device: torch.device) -> Tensor:
    """ComfyUI's ``get_2d_sincos_pos_embed_torch`` (centre 7.5, magnitude 7.5 along the shorter
    side): (h * w, dim) float32, the width's half first."""
    small = min(h, w)
    val_h, val_w = (h / small) * 7.5, (w / small) * 7.5
    grid_h, grid_w = torch.meshgrid(
        torch.linspace(-val_h + 7.5, val_h + 7.5, h, device=device, dtype=torch.float32),
        torch.linspace(-val_w + 7.5, val_w + 7.5, w, device=device, dtype=torch.float32),
        indexing="ij",
    )
    return torch.cat([_sincos_1d(dim // 2, grid_w), _sincos_1d(dim // 2, grid_h)], dim=1)


def _sincos_1d(dim: int, pos: Tensor) -> Tensor:
    omega = torch.arange(dim // 2, device=pos.device, dtype=torch.float32)
    omega /= dim / 2.0
    omega = 1.0 / 10000**omega
    out = torch.einsum("m,d->md", pos.reshape(-1), omega)
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)


def _pad(x: Tensor, p: int) -> Tensor:
    """As the MMDiT pads its latent to whole patches (circular)."""
    pad_h, pad_w = (-x.shape[-2]) % p, (-x.shape[-1]) % p
    return F.pad(x, (0, pad_w, 0, pad_h), mode="circular") if pad_h or pad_w else x


def _hint(inp: ControlInput, p: int) -> Tensor:
    hint = inp.hint.to(device=inp.x.device, dtype=inp.x.dtype)
    return _pad(hint.expand(inp.x.shape[0], *hint.shape[1:]), p)


def _require(points: PatchPoints) -> None:
    points.require("This SD3 ControlNet", "wrong_controlnet", blocks=("joint",))


class JointControlNet(nn.Module):
    """diffusers' joint-block ``SD3ControlNetModel`` (original-layout names; ``config.depth`` is its
    number of blocks, none pre-only)."""

    hint_space: HintSpace = "latent"
    pos_embed: Tensor

    def __init__(
        self,
        config: MMDiTConfig,
        hint_channels: int,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if config.adm_in_channels is None or config.context_dim is None:
            raise ValueError("an SD3 ControlNet with joint blocks needs pooled and context embedders")
        self.config, self.hint_channels = config, hint_channels
        dev = torch.device(device) if device is not None else None
        hidden, p = config.hidden_size, config.patch_size
        self.x_embedder = PatchEmbed(config.in_channels, hidden, p, ops=ops, device=dev, dtype=dtype)
        table = torch.empty(1, config.pos_embed_max_size**2, hidden, device=dev, dtype=dtype)
        self.register_buffer("pos_embed", table)
        self.t_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.y_embedder = Embedder(config.adm_in_channels, hidden, ops=ops, device=dev, dtype=dtype)
        self.context_embedder = ops.Linear(config.context_dim, hidden, bias=True, device=dev, dtype=dtype)
        rms = config.qk_norm == "rms"
        self.joint_blocks = nn.ModuleList(
            JointBlock(hidden, config.num_heads, config.mlp_ratio, qk_norm=rms, pre_only=False,
                       dual_attention=i in config.dual_attention_layers, ops=ops, device=dev, dtype=dtype)
            for i in range(config.depth)
        )  # fmt: skip
        self.controlnet_blocks = nn.ModuleList(
            ops.Linear(hidden, hidden, bias=True, device=dev, dtype=dtype) for _ in range(config.depth)
        )
        self.pos_embed_input = PatchEmbed(hint_channels, hidden, p, ops=ops, device=dev, dtype=dtype)

    def control(self, inp: ControlInput) -> JointResiduals:
        cfg, x = self.config, inp.x
        dtype, p = x.dtype, cfg.patch_size
        x = _pad(x, p)
        h, w = x.shape[-2] // p, x.shape[-1] // p
        tokens = self.x_embedder(x)
        tokens = tokens + cropped_pos_embed(self.pos_embed, cfg, h, w, tokens)
        tokens = tokens + self.pos_embed_input(_hint(inp, p))
        c = self.t_embedder(timestep_embedding(inp.timestep.to(dtype), FREQUENCY_EMBEDDING_SIZE).to(dtype))
        if inp.cond.pooled is None:
            raise ModelMismatchError(
                "This SD3 ControlNet needs the model's pooled text vectors",
                fix="Use it with an SD3 / SD3.5 model",
                code="wrong_controlnet",
            )
        c = c + self.y_embedder(torch.zeros_like(inp.cond.pooled, dtype=dtype))  # ComfyUI: y zeroed
        ctx: Tensor | None = self.context_embedder(inp.cond.context.to(dtype))
        outs = []
        for block, out in zip(self.joint_blocks, self.controlnet_blocks, strict=True):
            assert ctx is not None
            ctx, tokens = block(ctx, tokens, c)
            outs.append(out(tokens))
        return JointResiduals.repeated(outs, joint_counts(cfg.hidden_size, cfg.depth))

    def hint_pixels(self, pixels: Tensor) -> Tensor:
        return pixels

    def hint_latent(self, encoded: Tensor, latent_format: LatentFormat) -> Tensor:
        """SD3's scale without its shift (ComfyUI: ``shift_factor = 0``); an inpainting net's 17th
        channel is ComfyUI's default mask of ones (no mask given)."""
        latent = dataclasses.replace(latent_format, shift=0.0).process_in(encoded)
        extra = self.hint_channels - latent.shape[1]
        if extra > 0:
            latent = torch.cat([latent, latent.new_ones(latent.shape[0], extra, *latent.shape[2:])], dim=1)
        return latent

    def require_points(self, points: PatchPoints) -> None:
        _require(points)

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        p = self.config.patch_size
        tokens = -(-height // p) * -(-width // p)
        return residual_bytes(self.config.depth, self.config.hidden_size, batch, tokens, element)


@dataclasses.dataclass(frozen=True)
class SD35ControlConfig:
    """Stability's SD3.5 ControlNet: ``blocks`` picture-only blocks ``hidden`` wide (``heads`` of
    64), pooled text ``adm`` wide, a ``hint_channels`` latent hint, ``control_type`` stored or not."""

    hidden: int
    blocks: int
    adm: int
    hint_channels: int = 16
    in_channels: int = 16
    patch_size: int = 2
    mlp_ratio: float = 4.0
    control_type: tuple[int, ...] | None = None

    @property
    def heads(self) -> int:
        return self.hidden // 64


class SD35ControlNet(nn.Module):
    """Stability's SD3.5 Large ControlNet (original-layout names)."""

    hint_space: HintSpace = "latent"
    #: the base network's ``x_embedder.proj`` (weight, bias), a CPU copy (:meth:`take_from_base`)
    base_patch: tuple[Tensor, Tensor] | None

    def __init__(
        self,
        config: SD35ControlConfig,
        *,
        names: Mapping[str, str] | None = None,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        #: module prefix -> the file's prefix, where the file names a part another way
        self.file_names: Mapping[str, str] = dict(names or {})
        dev = torch.device(device) if device is not None else None
        hidden = config.hidden
        self.t_embedder = Embedder(FREQUENCY_EMBEDDING_SIZE, hidden, ops=ops, device=dev, dtype=dtype)
        self.y_embedder = Embedder(config.adm, hidden, ops=ops, device=dev, dtype=dtype)
        self.transformer_blocks = nn.ModuleList(
            DismantledBlock(hidden, config.heads, config.mlp_ratio, qk_norm=False, pre_only=False,
                            dual_attention=False, ops=ops, device=dev, dtype=dtype)
            for _ in range(config.blocks)
        )  # fmt: skip
        self.controlnet_blocks = nn.ModuleList(
            ops.Linear(hidden, hidden, bias=True, device=dev, dtype=dtype) for _ in range(config.blocks)
        )
        p = config.patch_size
        self.pos_embed_input = PatchEmbed(config.hint_channels, hidden, p, ops=ops, device=dev, dtype=dtype)
        if config.control_type is not None:
            self.register_buffer("control_type", torch.zeros(config.control_type, device=dev))
        self.base_patch = None

    def take_from_base(self, network: nn.Module) -> None:
        """Copy the base MMDiT's latent patch embedding (ComfyUI's ``ControlNetSD35.pre_run``)."""
        try:
            proj = network.get_submodule("x_embedder.proj")
        except AttributeError:
            proj = None
        weight, bias = getattr(proj, "weight", None), getattr(proj, "bias", None)
        cfg = self.config
        want = (cfg.hidden, cfg.in_channels, cfg.patch_size, cfg.patch_size)
        if not isinstance(weight, Tensor) or not isinstance(bias, Tensor) or tuple(weight.shape) != want:
            raise ModelMismatchError(
                "This SD3.5 ControlNet does not fit the loaded model",
                why=f"it embeds the latent with its base model's {want[0]}-wide patch embedding, "
                "which the loaded model does not have",
                fix="Use it with SD3.5 Large",
                code="wrong_controlnet",
            )
        self.base_patch = (weight.detach().to("cpu", copy=True), bias.detach().to("cpu", copy=True))

    def control(self, inp: ControlInput) -> JointResiduals:
        cfg, x = self.config, inp.x
        if self.base_patch is None:
            raise ModelMismatchError(
                "This SD3.5 ControlNet was not given its base model's patch embedding",
                fix="Report this; run the picture without the ControlNet meanwhile",
                code="wrong_controlnet",
            )
        dtype, p = x.dtype, cfg.patch_size
        x = _pad(x, p)
        h, w = x.shape[-2] // p, x.shape[-1] // p
        weight, bias = (t.to(device=x.device, dtype=dtype) for t in self.base_patch)
        tokens = F.conv2d(x, weight, bias, stride=p).flatten(2).transpose(1, 2)
        tokens = (tokens + sincos_grid(cfg.hidden, w, h, x.device)).to(dtype)
        c = self.t_embedder(timestep_embedding(inp.timestep.to(dtype), FREQUENCY_EMBEDDING_SIZE).to(dtype))
        if inp.cond.pooled is not None:
            c = c + self.y_embedder(inp.cond.pooled.to(dtype))
        tokens = tokens + self.pos_embed_input(_hint(inp, p))
        outs = []
        for block, out in zip(self.transformer_blocks, self.controlnet_blocks, strict=True):
            assert isinstance(block, DismantledBlock)
            tokens = _picture_block(block, tokens, c)
            outs.append(out(tokens))
        return JointResiduals.repeated(outs, sd35_counts(cfg.hidden, cfg.blocks))

    def kind(self) -> int:
        """The file's ``control_type`` (blur 0, canny 1, depth 2; -1 when it has none)."""
        stored = getattr(self, "control_type", None)
        return -1 if not isinstance(stored, Tensor) else round(float(stored.reshape(-1)[0]))

    def hint_pixels(self, pixels: Tensor) -> Tensor:
        kind = self.kind()
        if kind == CANNY:
            return pixels * 255 * 0.5 + 0.5
        if kind == DEPTH:
            return 1.0 - pixels
        return pixels

    def hint_latent(self, encoded: Tensor, latent_format: LatentFormat) -> Tensor:
        return latent_format.process_in(encoded)

    def require_points(self, points: PatchPoints) -> None:
        _require(points)

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        p = self.config.patch_size
        tokens = -(-height // p) * -(-width // p)
        return residual_bytes(self.config.blocks, self.config.hidden, batch, tokens, element)


def _picture_block(block: DismantledBlock, x: Tensor, c: Tensor) -> Tensor:
    """One picture-only DiT block (ComfyUI's ``DismantledBlock.forward``): adaLN, self-attention,
    MLP."""
    mods = block.modulation(c)
    normed = block.norm1(x)
    q, k, v = block.attn.qkv_heads(modulate(normed, mods[0], mods[1]))
    return block.post_attention(x, normed, attend_heads(None, q, k, v, 0, "self"), mods)
