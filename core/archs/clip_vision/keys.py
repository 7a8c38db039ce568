"""open_clip's image tower (``visual.`` in a full open_clip dump, as ComfyUI accepts it) ->
the transformers layout this package's network has: ``conv1`` is the patch embedding,
``class_embedding``, ``positional_embedding``, ``ln_pre``/``ln_post``, ``proj`` a (width,
projection) matrix used as ``x @ P`` (the transposed ``visual_projection.weight``) and each
``transformer.resblocks.N`` with q, k and v stacked in ``attn.in_proj_*``. Every source is a view
of the file's tensor (no copy): a third of the fused q/k/v or a transpose."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

OPEN_CLIP_PREFIX = "visual."
_GLOBAL = {
    "class_embedding": "vision_model.embeddings.class_embedding",
    "conv1.weight": "vision_model.embeddings.patch_embedding.weight",
    "positional_embedding": "vision_model.embeddings.position_embedding.weight",
    "ln_pre.weight": "vision_model.pre_layrnorm.weight",
    "ln_pre.bias": "vision_model.pre_layrnorm.bias",
    "ln_post.weight": "vision_model.post_layernorm.weight",
    "ln_post.bias": "vision_model.post_layernorm.bias",
}
_PER_LAYER = (("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"), ("attn.out_proj", "self_attn.out_proj"),
              ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2"))  # fmt: skip


@dataclass(frozen=True)
class Source:
    """Where one transformers-layout tensor is in the file: its key, and ``part`` None (as it is),
    0/1/2 (that third of a fused q/k/v along dim 0) or -1 (transposed)."""

    key: str
    part: int | None = None

    def read(self, get: Callable[[str], torch.Tensor]) -> torch.Tensor:
        t = get(self.key)
        if self.part is None:
            return t
        if self.part < 0:
            return t.t()
        return t.chunk(3, dim=0)[self.part]

    def shape(self, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
        s = tuple(shapes[self.key])
        if self.part is None:
            return s
        return (s[1], s[0]) if self.part < 0 else (s[0] // 3, *s[1:])


def open_clip_sources(
    shapes: Mapping[str, Sequence[int]], prefix: str = OPEN_CLIP_PREFIX
) -> dict[str, Source]:
    """transformers key -> :class:`Source` for an open_clip image tower under ``prefix``; file keys
    this map does not name are the caller's to refuse."""
    out = {hf: Source(prefix + oc) for oc, hf in _GLOBAL.items()}
    out["visual_projection.weight"] = Source(prefix + "proj", -1)
    marker = prefix + "transformer.resblocks."
    layers = {int(k[len(marker) :].split(".", 1)[0]) for k in shapes if k.startswith(marker)}
    for i in sorted(layers):
        oc, hf = f"{marker}{i}.", f"vision_model.encoder.layers.{i}."
        for old, new in _PER_LAYER:
            for p in ("weight", "bias"):
                out[f"{hf}{new}.{p}"] = Source(f"{oc}{old}.{p}")
        for n, name in enumerate(("q_proj", "k_proj", "v_proj")):
            for p in ("weight", "bias"):
                out[f"{hf}self_attn.{name}.{p}"] = Source(f"{oc}attn.in_proj_{p}", n)
    return out


def transformers_sources(shapes: Mapping[str, Sequence[int]], prefix: str = "") -> dict[str, Source]:
    """transformers key -> :class:`Source` for a file already in that layout (under ``prefix``)."""
    return {k[len(prefix) :]: Source(k) for k in shapes if k.startswith(prefix)}
