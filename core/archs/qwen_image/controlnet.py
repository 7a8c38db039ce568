"""Qwen-Image's ControlNets in InstantX's layout (``Qwen-Image-ControlNet-Union``,
``Qwen-Image-ControlNet-Inpainting``; diffusers' ``QwenImageControlNetModel``), as ComfyUI's
``comfy/ldm/qwen_image/controlnet.py`` computes them.

The net is a few of Qwen-Image's own dual-stream blocks (five in the union release, six in the
inpainting one) with the MMDiT's input side (``img_in``, ``txt_norm``, ``txt_in``,
``time_text_embed``) and no output side, plus:

* ``controlnet_x_embedder``: the hint latent, packed in 2x2 patches as the picture is, projected to
  the width and added to ``img_in``'s tokens. The hint is the control picture VAE-encoded into the
  Wan 2.1 latent space (``hint_space = "latent"``); the inpainting net takes 4 more numbers per
  token, the 2x2 patch of a mask channel after the 16 latent channels (ComfyUI's ``concat_mask``:
  1 where the picture is kept, the picture blacked out where it is repainted,
  :class:`MaskedHint`);
* ``controlnet_blocks.N``: one linear layer per block, whose output is the residual added to the
  base network's picture tokens after its blocks.

The base network has 60 blocks; a net with fewer gives block ``i`` the residual of its block
``i // ceil(60 / n)`` (ComfyUI repeats each residual ``ceil(60 / n)`` times and keeps the first 60;
diffusers' ``interval_control`` is the same for the released 60-block models, docs/families.md).
The residuals reach the base network as a block patch on its ``double`` stage
(:class:`QwenControlResiduals`), added to the first tokens of the picture stream (an Edit model's
reference tokens after them get nothing), as ComfyUI's ``hidden_states[:, :n] += add``.
The union net has no control-type input: it reads the kind of map from the hint itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

import torch
from torch import Tensor, nn

from core.archs.control import ControlNetLoader
from core.errors import ModelMismatchError
from core.models.patches import NetworkPatches, PatchPoints, Site
from core.models.qwen_image import QwenImageConfig
from core.models.qwen_image.network import EPS, DualStreamBlock, TimeTextEmbed, patchify, positions
from core.ops.layers import OpSet, default_ops

if TYPE_CHECKING:
    from core.archs.control import ControlInput
    from core.detect.types import Detection

#: the base network's blocks ComfyUI spreads the residuals over (``main_model_double``: every
#: Qwen-Image release has 60)
MAIN_BLOCKS = 60

#: keys every InstantX Qwen-Image ControlNet has
REQUIRED = (
    "img_in.weight",
    "txt_in.weight",
    "txt_norm.weight",
    "time_text_embed.timestep_embedder.linear_1.weight",
    "transformer_blocks.0.attn.norm_q.weight",
    "transformer_blocks.0.img_mlp.net.0.proj.weight",
    "controlnet_blocks.0.weight",
    "controlnet_x_embedder.weight",
)


def mismatch(why: str) -> ModelMismatchError:
    return ModelMismatchError(
        "the ControlNet does not fit this diffusion model",
        why=why,
        fix="Use a ControlNet made for Qwen-Image with a Qwen-Image model",
        code="wrong_controlnet",
    )


def controlnet_config(shapes: Mapping[str, Sequence[int]]) -> tuple[QwenImageConfig, int]:
    """The blocks' config and the hint's extra channels per latent cell (the inpainting net's mask:
    1) from a file's key -> shape map; a ``KeyError`` / ``ValueError`` says why it is not one."""
    missing = [k for k in REQUIRED if k not in shapes]
    if missing:
        raise KeyError(f"missing {missing[:3]}")
    dim, packed = (int(d) for d in shapes["img_in.weight"][:2])
    head_dim = int(shapes["transformer_blocks.0.attn.norm_q.weight"][0])
    blocks = {int(k.split(".")[1]) for k in shapes if k.startswith("transformer_blocks.")}
    projections = {int(k.split(".")[1]) for k in shapes if k.startswith("controlnet_blocks.")}
    if blocks != projections or blocks != set(range(len(blocks))):
        raise ValueError(f"{len(blocks)} blocks and {len(projections)} controlnet_blocks projections")
    embed_in = int(shapes["controlnet_x_embedder.weight"][1])
    extra, rest = divmod(embed_in - packed, 4)
    if extra < 0 or rest:
        raise ValueError(f"a hint embedder taking {embed_in} numbers per token beside {packed}")
    config = QwenImageConfig(
        dim=dim,
        n_layers=len(blocks),
        n_heads=dim // head_dim if head_dim else 0,
        mlp_hidden=int(shapes["transformer_blocks.0.img_mlp.net.0.proj.weight"][0]),
        context_dim=int(shapes["txt_in.weight"][1]),
        latent_channels=packed // 4,
        out_channels=packed // 4,
        time_features=int(shapes["time_text_embed.timestep_embedder.linear_1.weight"][1]),
    )
    return config, extra


@dataclass(frozen=True)
class QwenControlResiduals:
    """What Qwen-Image ControlNets add to one call: each net's per-block residuals (B, tokens, D) and
    how many base blocks each covers, in stacking order. Block ``i`` (below 60) gets the sum of the
    nets' residuals at ``i // repeat``; ComfyUI's ``control_merge`` sums the expanded lists the same
    way (the earlier sum plus the next net's), here only when a block asks for its residual."""

    parts: tuple[tuple[tuple[Tensor, ...], int], ...]

    def scaled(self, strength: float) -> QwenControlResiduals:
        """Times ``strength``, in the nets' dtype (ComfyUI's ``x *= strength``; its ControlNets hand
        the residuals over as they are, ``output_dtype=None``)."""
        return QwenControlResiduals(
            tuple((tuple(s * strength for s in samples), repeat) for samples, repeat in self.parts)
        )

    def merged(self, later: object) -> QwenControlResiduals | QwenControls:
        if not isinstance(later, QwenControlResiduals):
            return QwenControls((), self).merged(later)
        return QwenControlResiduals(self.parts + later.parts)

    def at(self, index: int) -> Tensor | None:
        """The summed residual for base block ``index`` (None past the 60 blocks)."""
        if index >= MAIN_BLOCKS:
            return None
        total: Tensor | None = None
        for samples, repeat in self.parts:
            found = samples[index // repeat] if index // repeat < len(samples) else None
            if found is not None:
                total = found if total is None else total + found
        return total

    def patches(self) -> NetworkPatches:
        return NetworkPatches(blocks=(self._add,))

    def _add(self, h: Tensor, site: Site) -> Tensor:
        if site.stage != "double":
            return h
        residual = self.at(site.index)
        if residual is None:
            return h
        n = residual.shape[1]
        if residual.shape[0] != h.shape[0] or residual.shape[2] != h.shape[2] or n > h.shape[1]:
            raise mismatch(
                f"it gives a {list(residual.shape)} residual where the network has {list(h.shape)}"
            )
        head = (h[:, :n] + residual).to(h.dtype)  # ComfyUI's in-place ``+=`` on the picture's tokens
        return head if n == h.shape[1] else torch.cat([head, h[:, n:]], dim=1)


@runtime_checkable
class QwenModelPatch(Protocol):
    """A Qwen-Image model patch's output (DiffSynth's blockwise ControlNets): block patches that
    ComfyUI runs after each block before any ControlNet's residual is added."""

    def scaled(self, strength: float) -> QwenModelPatch: ...

    def qwen_block_patches(self) -> NetworkPatches:
        """The block patches (its ``patches()``)."""
        ...


@dataclass(frozen=True)
class QwenControls:
    """Qwen-Image's model patches and ControlNet residuals of one call, in ComfyUI's order after
    each block: the model patches one after the other (as they were added), then the summed
    residuals (``control["input"]``), whatever order the nets were stacked in."""

    model_patches: tuple[QwenModelPatch, ...]
    residuals: QwenControlResiduals | None

    def scaled(self, strength: float) -> QwenControls:
        residuals = self.residuals.scaled(strength) if self.residuals is not None else None
        return QwenControls(tuple(p.scaled(strength) for p in self.model_patches), residuals)

    def merged(self, later: object) -> QwenControls:
        if isinstance(later, QwenControls):
            residuals = later.residuals
            if self.residuals is not None:
                parts = self.residuals.parts + (residuals.parts if residuals is not None else ())
                residuals = QwenControlResiduals(parts)
            return QwenControls(self.model_patches + later.model_patches, residuals)
        if isinstance(later, QwenControlResiduals):
            return self.merged(QwenControls((), later))
        if isinstance(later, QwenModelPatch):
            return QwenControls((*self.model_patches, later), self.residuals)
        raise mismatch("a Qwen-Image ControlNet was stacked with a ControlNet of another network")

    def patches(self) -> NetworkPatches:
        out = NetworkPatches()
        for part in self.model_patches:
            out = out + part.qwen_block_patches()
        return out + self.residuals.patches() if self.residuals is not None else out


class QwenImageControlNet(nn.Module):
    """InstantX's Qwen-Image ControlNet: ``forward(x, hint, timesteps, context)`` -> one residual
    per block (B, tokens, D). ``extra_channels``: the hint's channels beyond the latent's (the
    inpainting net's mask: 1)."""

    hint_space: Literal["pixels", "latent"] = "latent"

    def __init__(
        self,
        config: QwenImageConfig,
        extra_channels: int = 0,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = cfg = config
        self.extra_channels = extra_channels
        dev = torch.device(device) if device is not None else None
        kw = {"ops": ops, "device": dev, "dtype": dtype}
        self.img_in = ops.Linear(cfg.in_channels, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.txt_norm = ops.RMSNorm(cfg.context_dim, eps=EPS, device=dev, dtype=dtype)
        self.txt_in = ops.Linear(cfg.context_dim, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.time_text_embed = TimeTextEmbed(cfg, **kw)  # type: ignore[arg-type]
        self.transformer_blocks = nn.ModuleList(DualStreamBlock(cfg, **kw) for _ in range(cfg.n_layers))  # type: ignore[arg-type]
        self.controlnet_blocks = nn.ModuleList(
            ops.Linear(cfg.dim, cfg.dim, bias=True, device=dev, dtype=dtype) for _ in range(cfg.n_layers)
        )
        packed = (cfg.latent_channels + extra_channels) * cfg.patch_size**2
        self.controlnet_x_embedder = ops.Linear(packed, cfg.dim, bias=True, device=dev, dtype=dtype)

    @property
    def mask_hint(self) -> bool:
        """Whether its hint carries the mask (:class:`core.archs.control.MaskedHint`)."""
        return self.extra_channels > 0

    @property
    def repeat(self) -> int:
        """Base blocks per residual (ComfyUI's ``ceil(main_model_double / n)``)."""
        return math.ceil(MAIN_BLOCKS / len(self.controlnet_blocks))

    def forward(self, x: Tensor, hint: Tensor, timesteps: Tensor, context: Tensor) -> tuple[Tensor, ...]:
        p = self.config.patch_size
        img, h, w = patchify(x, p)
        cond, _, _ = patchify(hint, p)
        img = self.img_in(img) + self.controlnet_x_embedder(cond)
        txt = self.txt_in(self.txt_norm(context.to(img.dtype)))
        temb = self.time_text_embed(timesteps.float(), img.dtype)
        pe = positions(h, w, txt.shape[1], x.device).squeeze(1).unsqueeze(2)
        out = []
        for block, project in zip(
            cast(Sequence[DualStreamBlock], self.transformer_blocks), self.controlnet_blocks, strict=True
        ):
            img, txt = block(img, txt, temb, pe)
            out.append(project(img))
        return tuple(out)

    def control(self, inp: ControlInput) -> QwenControlResiduals:
        """The residuals for one call, run in ``x``'s dtype (the timestep cast to it first, as
        ComfyUI hands its ControlNet ``timestep.to(dtype)``); a one-picture hint serves the batch."""
        x = inp.x[:, :, 0] if inp.x.ndim == 5 else inp.x
        hint = inp.hint[:, :, 0] if inp.hint.ndim == 5 else inp.hint
        want = self.config.latent_channels + self.extra_channels
        if hint.shape[1] != want or hint.shape[-2:] != x.shape[-2:]:
            raise mismatch(
                f"its hint has {hint.shape[1]} channels of {list(hint.shape[-2:])} cells; it takes {want} "
                f"channels at the latent's {list(x.shape[-2:])}"
            )
        hint = hint.to(device=x.device, dtype=x.dtype).expand(x.shape[0], -1, -1, -1)
        timestep = inp.timestep.to(x.dtype)
        samples = self(x, hint, timestep, inp.cond.context.to(x.dtype))
        return QwenControlResiduals(((samples, self.repeat),))

    def require_points(self, points: PatchPoints) -> None:
        points.require("this ControlNet", "wrong_controlnet", blocks=("double",))

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """Its residuals as they wait for the base network's blocks: one per block over the picture's
        2x2 patches, in the compute dtype."""
        tokens = -(-height // 2) * -(-width // 2)
        return len(self.controlnet_blocks) * batch * tokens * self.config.dim * element


def _build(shapes: Mapping[str, tuple[int, ...]], det: Detection) -> QwenImageControlNet:
    config, extra = controlnet_config(shapes)
    return QwenImageControlNet(config, extra, device="meta")


#: InstantX's union and inpainting nets (one layout: diffusers' names, as released and repacked)
INSTANTX = ControlNetLoader("qwen-image-instantx", ("qwen-image",), _build, layouts=("diffusers",))
