"""FaceID's image projections (h94's IP-Adapter-FaceID files, ComfyUI_IPAdapter_plus's
``MLPProjModelFaceId`` and ``ProjModelFaceIdPlus``), over InsightFace's 512-wide identity embedding:

* FaceID (and the portrait adapters): ``image_proj.proj.0`` (512 -> 1024), GELU, ``proj.2``
  (-> ``tokens`` x the cross width), ``norm`` (LayerNorm): 4 tokens (portrait: 16);
* FaceID Plus (v1, v2): the same face tokens, then ``image_proj.perceiver_resampler`` (the plus
  resampler's attention and feed-forward layers with the face tokens as its queries, no learned
  latents) over CLIP vision's penultimate hidden states of the aligned face crop; v2 adds the face
  tokens back (the "shortcut"): ``tokens + scale * resampled`` (the pack's ``weight_faceidv2``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.ops.layers import OpSet

_P = "image_proj.perceiver_resampler."
_LAYER = re.compile(r"^image_proj\.perceiver_resampler\.layers\.(\d+)\.")


@dataclass(frozen=True)
class FaceProjConfig:
    id_dim: int
    hidden: int
    tokens: int
    cross: int
    #: FaceID Plus's resampler: (depth, heads, clip width, feed-forward inner width); None: plain
    plus: tuple[int, int, int, int] | None = None


def face_config(shapes: Mapping[str, Sequence[int]]) -> FaceProjConfig | None:
    """The FaceID projection of a file with these shapes, or None when it has none."""
    first, second = shapes.get("image_proj.proj.0.weight"), shapes.get("image_proj.proj.2.weight")
    if first is None or second is None or "image_proj.proj.3.weight" in shapes:
        return None
    width = int(shapes["image_proj.norm.weight"][0])
    plus = None
    if f"{_P}proj_in.weight" in shapes:
        depth = 1 + max(int(m.group(1)) for k in shapes if (m := _LAYER.match(k)))
        heads = int(shapes[f"{_P}layers.0.0.to_q.weight"][0]) // 64
        plus = (
            depth,
            heads,
            int(shapes[f"{_P}proj_in.weight"][1]),
            int(shapes[f"{_P}layers.0.1.1.weight"][0]),
        )
    return FaceProjConfig(int(first[1]), int(first[0]), int(second[0]) // width, width, plus)


class _GELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class FaceResampler(nn.Module):
    """FaceID Plus's perceiver: the face tokens attend over [CLIP tokens, face tokens]."""

    def __init__(
        self, c: FaceProjConfig, make_layers: Any, ops: OpSet, device: Any, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        assert c.plus is not None
        _, _, clip, _ = c.plus
        self.proj_in = ops.Linear(clip, c.cross, device=device, dtype=dtype)
        self.proj_out = ops.Linear(c.cross, c.cross, device=device, dtype=dtype)
        self.norm_out = ops.LayerNorm(c.cross, device=device, dtype=dtype)
        self.layers: nn.ModuleList = make_layers()

    def forward(self, latents: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for pair in self.layers:
            attn, ff = pair[0], pair[1]  # type: ignore[index]
            latents = attn(x, latents) + latents
            latents = ff(latents) + latents
        out: torch.Tensor = self.norm_out(self.proj_out(latents))
        return out


class FaceProjection(nn.Module):
    """FaceID's image projection: ``forward(face)`` for FaceID, ``plus(face, clip, scale,
    shortcut)`` for FaceID Plus."""

    def __init__(
        self, c: FaceProjConfig, make_layers: Any, ops: OpSet, device: Any, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.tokens, self.width = c.tokens, c.cross
        self.proj = nn.Sequential(
            ops.Linear(c.id_dim, c.hidden, device=device, dtype=dtype),
            _GELU(),
            ops.Linear(c.hidden, c.tokens * c.cross, device=device, dtype=dtype),
        )
        self.norm = ops.LayerNorm(c.cross, device=device, dtype=dtype)
        self.perceiver_resampler = (
            None if c.plus is None else FaceResampler(c, make_layers, ops, device, dtype)
        )

    def forward(self, face: torch.Tensor) -> torch.Tensor:
        """``proj`` then ``norm``: the identity embedding as ``tokens`` tokens."""
        out: torch.Tensor = self.norm(self.proj(face).reshape(-1, self.tokens, self.width))
        return out

    def plus(self, face: torch.Tensor, clip: torch.Tensor, scale: float, shortcut: bool) -> torch.Tensor:
        assert self.perceiver_resampler is not None
        tokens = self(face)
        out: torch.Tensor = self.perceiver_resampler(tokens, clip)
        return tokens + scale * out if shortcut else out
