"""DiffSynth-Studio's blockwise Qwen-Image ControlNets (``Qwen-Image-Blockwise-ControlNet-Canny``,
``-Depth``, ``-Inpaint``; Comfy-Org's ``qwen_image_*_diffsynth_controlnet.safetensors``), computed as
ComfyUI's ``ModelPatchLoader`` and ``QwenImageDiffsynthControlnet`` do (a model patch:
``comfy_extras/nodes_model_patch.py``).

The net has no transformer blocks of its own:

* ``img_in``: the hint latent, packed in 2x2 patches as the picture is (64 numbers per token; the
  inpainting net 4 more, the 2x2 patch of one mask channel), projected to the width once per call;
* ``controlnet_blocks.N``: after base block ``N``, a small block reads the picture's tokens as the
  block left them and the projected hint (each RMS-normed, added, ``Linear``, GELU, ``Linear``);
  its output times the strength is added to those tokens. The residual depends on the base
  network's own tokens, so it is computed as the forward reaches each block (a lazy model patch,
  a block patch on the ``double`` stage), never ahead.

The hint is the control picture centre-cropped and resized with ``area`` to the latent's size in
pixels, VAE-encoded into the Wan 2.1 latent space (the base model's ``process_in``). The
inpainting net's mask channel is the kept part (1 kept, 0 repainted: ComfyUI's node flips the
MASK it is given), resized ``bilinear`` to the latent's cells without a crop; with no mask, ones.
Its picture is encoded as given (InstantX's inpainting net's is blacked out where repainted; this
one's is not). Several of these nets and InstantX's apply after each block in ComfyUI's order:
every model patch, then the ControlNets' residuals (:class:`QwenControls`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.archs.control import ControlNetLoader, HintSpace
from core.archs.qwen_image.controlnet import QwenControls, mismatch
from core.models.patches import NetworkPatches, PatchPoints, Site
from core.models.qwen_image.network import patchify
from core.ops.layers import OpSet, default_ops

if TYPE_CHECKING:
    from core.archs.control import ControlInput
    from core.detect.types import Detection

#: the latent's channels (the Wan 2.1 latent space) and the patch side
LATENT_CHANNELS = 16
PATCH = 2
#: ComfyUI's ``ModelPatchLoader`` marker for these files
MARKER = "controlnet_blocks.0.y_rms.weight"
FEATURE = "the blockwise ControlNet"


class BlockwiseBlock(nn.Module):
    """``(x, y)`` -> ``output_proj(gelu(input_proj(rms(x) + rms(y))))``."""

    def __init__(
        self, dim: int, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.x_rms = ops.RMSNorm(dim, eps=1e-6, device=device, dtype=dtype)
        self.y_rms = ops.RMSNorm(dim, eps=1e-6, device=device, dtype=dtype)
        self.input_proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)
        self.output_proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        out: Tensor = self.output_proj(F.gelu(self.input_proj(self.x_rms(x) + self.y_rms(y))))
        return out


def blockwise_config(shapes: Mapping[str, Sequence[int]]) -> tuple[int, int, int]:
    """(width, blocks, mask channels) from a file's key -> shape map; a ``KeyError`` /
    ``ValueError`` says why it is not one."""
    if MARKER not in shapes or "img_in.weight" not in shapes:
        raise KeyError(f"missing {MARKER!r} or 'img_in.weight'")
    dim, packed = (int(d) for d in shapes["img_in.weight"][:2])
    blocks = {int(k.split(".")[1]) for k in shapes if k.startswith("controlnet_blocks.")}
    if blocks != set(range(len(blocks))):
        raise ValueError(f"controlnet_blocks numbered {sorted(blocks)[:5]}... with gaps")
    extra, rest = divmod(packed - LATENT_CHANNELS * PATCH**2, PATCH**2)
    if extra < 0 or rest:
        raise ValueError(f"a hint projection taking {packed} numbers per token")
    return dim, len(blocks), extra


class QwenBlockwiseControlNet(nn.Module):
    """The net: ``img_in`` and one :class:`BlockwiseBlock` per base block. ``extra_channels``: the
    hint's channels beyond the latent's (the inpainting net's mask: 1)."""

    hint_space: HintSpace = "latent"
    hint_resize = "area"

    def __init__(
        self,
        dim: int,
        layers: int,
        extra_channels: int = 0,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dev = torch.device(device) if device is not None else None
        self.dim, self.extra_channels = dim, extra_channels
        packed = (LATENT_CHANNELS + extra_channels) * PATCH**2
        self.img_in = ops.Linear(packed, dim, bias=True, device=dev, dtype=dtype)
        self.controlnet_blocks = nn.ModuleList(
            BlockwiseBlock(dim, ops=ops, device=dev, dtype=dtype) for _ in range(layers)
        )

    @property
    def mask_hint(self) -> bool:
        """Whether its hint carries the mask (:class:`core.archs.control.MaskedHint`)."""
        return self.extra_channels > 0

    def block(self, index: int) -> BlockwiseBlock:
        return cast(BlockwiseBlock, self.controlnet_blocks[index])

    def masked_latent_hint(
        self, pixels: Tensor, keep: Tensor | None, encode: Callable[[Tensor], Tensor]
    ) -> Tensor:
        """The inpainting net's hint (:class:`core.archs.control.MakesMaskedHint`): the picture's
        latent and the kept part (1, 1, H, W) resized ``bilinear`` to its cells, no crop; ones
        without a mask."""
        latent = encode(pixels)
        cells = latent.shape[-2:]
        if keep is None:
            channel = torch.ones_like(latent[:, :1])
        else:
            channel = F.interpolate(keep.float(), size=tuple(cells), mode="bilinear").to(latent)
        channel = channel.expand(latent.shape[0], self.extra_channels, -1, -1)
        return torch.cat([latent, channel], dim=1)

    def embed(self, hint: Tensor, dtype: torch.dtype) -> Tensor:
        """(1, C, h, w) hint -> (1, tokens, width): 2x2 patches projected (ComfyUI's
        ``process_input_latent_image`` after the latent format)."""
        tokens, _, _ = patchify(hint.to(dtype), PATCH)
        out: Tensor = self.img_in(tokens)
        return out

    def control(self, inp: ControlInput) -> BlockwiseOutput:
        x = inp.x[:, :, 0] if inp.x.ndim == 5 else inp.x
        hint = inp.hint[:, :, 0] if inp.hint.ndim == 5 else inp.hint
        want = LATENT_CHANNELS + self.extra_channels
        if hint.ndim != 4 or hint.shape[1] != want or hint.shape[-2:] != x.shape[-2:]:
            raise mismatch(
                f"its hint has shape {list(hint.shape)}; it takes {want} channels at the latent's "
                f"{list(x.shape[-2:])} cells"
            )
        return BlockwiseOutput(self, self.embed(hint[:1].to(x.device), x.dtype), 1.0)

    def require_points(self, points: PatchPoints) -> None:
        points.require(FEATURE, "wrong_controlnet", blocks=("double",), fix="Use it with a Qwen-Image model")
        base = points.blocks.get("double", 0)
        if base > len(self.controlnet_blocks):
            raise mismatch(
                f"it has {len(self.controlnet_blocks)} control blocks for a network of {base} blocks"
            )

    def residual_bytes(self, batch: int, height: int, width: int, element: int) -> int:
        """The projected hint, and one control block's peak beside the base network's tokens: the
        two normed inputs, their sum and the projection's and GELU's outputs (5 widths a token)."""
        tokens = -(-height // PATCH) * -(-width // PATCH)
        return (1 + 5 * batch) * tokens * self.dim * element


@dataclass(frozen=True)
class BlockwiseOutput:
    """One blockwise net's part of a call: the projected hint, run block by block as the base
    forward reaches each (a model patch: ComfyUI's ``double_block`` patch)."""

    module: QwenBlockwiseControlNet
    hint: Tensor  # (1, tokens, width)
    strength: float

    def scaled(self, strength: float) -> BlockwiseOutput:
        return replace(self, strength=self.strength * strength)

    def merged(self, later: object) -> QwenControls:
        return QwenControls((self,), None).merged(later)

    def patches(self) -> NetworkPatches:
        return NetworkPatches(blocks=(self._add,))

    def qwen_block_patches(self) -> NetworkPatches:
        return self.patches()

    def _add(self, h: Tensor, site: Site) -> Tensor:
        """ComfyUI's ``img[:, :n] += control_block(img[:, :n], hint, i) * strength`` (an Edit
        model's reference tokens after the picture's get nothing)."""
        if site.stage != "double" or site.index >= len(self.module.controlnet_blocks):
            return h
        n = self.hint.shape[1]
        if n > h.shape[1] or h.shape[2] != self.hint.shape[2]:
            raise mismatch(
                f"its hint has {list(self.hint.shape[1:])} tokens where the network has {list(h.shape)}"
            )
        head = h[:, :n]
        add = self.module.block(site.index)(head, self.hint.to(device=h.device, dtype=h.dtype))
        h[:, :n] = head + add * self.strength
        return h


def _build(shapes: Mapping[str, tuple[int, ...]], det: Detection) -> QwenBlockwiseControlNet:
    dim, layers, extra = blockwise_config(shapes)
    return QwenBlockwiseControlNet(dim, layers, extra, device="meta")


#: DiffSynth's canny, depth and inpainting nets (their own names, as released and repacked)
LOADER = ControlNetLoader("qwen-image-blockwise", ("qwen-image",), _build, layouts=("blockwise",))
