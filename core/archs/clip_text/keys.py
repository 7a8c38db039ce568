"""open_clip text tower <-> transformers CLIP layout.

SD2 checkpoints hold OpenCLIP ViT-H under ``cond_stage_model.model.`` and SDXL ones ViT-bigG under
``conditioner.embedders.1.model.``, in open_clip's naming: ``transformer.resblocks.N.attn.in_proj_weight``
(q, k and v stacked along dim 0, as ``torch.nn.MultiheadAttention`` stores them), ``ln_1``, ``ln_2``,
``mlp.c_fc``, ``mlp.c_proj``, ``token_embedding.weight``, ``positional_embedding``, ``ln_final`` and
``text_projection``, a (width, projection) matrix used as ``x @ P``; transformers stores the same
weight as a bias-free linear, so ``text_projection.weight = P.T``.

Both functions take the state dict with the component prefix already stripped, never copy a tensor
they do not have to (q/k/v are views of the fused tensor), and refuse keys they do not know, apart
from the known harmless extras named below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import torch

from core.errors import ModelMismatchError

OPEN_CLIP_IGNORED_KEYS: Final = frozenset({"logit_scale"})
"""open_clip keys that are not part of the text tower: the contrastive temperature."""

OPEN_CLIP_IGNORED_PREFIXES: Final = ("visual.",)
"""open_clip sub-trees that are not part of the text tower: the image tower (some full CLIP dumps)."""

HF_IGNORED_KEYS: Final = frozenset({"text_model.embeddings.position_ids", "logit_scale"})
"""transformers-layout keys that carry no weights of the text tower: the old ``position_ids``
buffer (an ``arange``) and the contrastive temperature of a full ``CLIPModel``."""

_PER_LAYER: Final = (  # (open_clip name, transformers name) for plain weight/bias pairs
    ("ln_1", "layer_norm1"),
    ("ln_2", "layer_norm2"),
    ("attn.out_proj", "self_attn.out_proj"),
    ("mlp.c_fc", "mlp.fc1"),
    ("mlp.c_proj", "mlp.fc2"),
)
_GLOBAL: Final = (
    ("token_embedding.weight", "text_model.embeddings.token_embedding.weight"),
    ("positional_embedding", "text_model.embeddings.position_embedding.weight"),
    ("ln_final.weight", "text_model.final_layer_norm.weight"),
    ("ln_final.bias", "text_model.final_layer_norm.bias"),
)
_QKV: Final = ("q_proj", "k_proj", "v_proj")
_PROJECTION_OC: Final = "text_projection"
_PROJECTION_HF: Final = "text_projection.weight"


def _renames(num_layers: int) -> dict[str, str]:
    """open_clip key -> transformers key for every tensor that is only renamed."""
    names = dict(_GLOBAL)
    for i in range(num_layers):
        for oc, hf in _PER_LAYER:
            for kind in ("weight", "bias"):
                names[f"transformer.resblocks.{i}.{oc}.{kind}"] = f"text_model.encoder.layers.{i}.{hf}.{kind}"
    return names


def _fused(num_layers: int) -> dict[str, tuple[str, str, str]]:
    """open_clip fused in_proj key -> its (q, k, v) transformers keys."""
    fused: dict[str, tuple[str, str, str]] = {}
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            q, k, v = (f"text_model.encoder.layers.{i}.self_attn.{p}.{kind}" for p in _QKV)
            fused[f"transformer.resblocks.{i}.attn.in_proj_{kind}"] = (q, k, v)
    return fused


def _refuse(unknown: list[str], missing: list[str], source: str, num_layers: int) -> None:
    if not unknown and not missing:
        return
    parts = []
    if unknown:
        parts.append(f"unknown keys {sorted(unknown)[:8]}" + (" ..." if len(unknown) > 8 else ""))
    if missing:
        parts.append(f"missing keys {sorted(missing)[:8]}" + (" ..." if len(missing) > 8 else ""))
    raise ModelMismatchError(
        f"These tensors are not a {num_layers}-layer CLIP text tower in the {source} layout",
        why="; ".join(parts),
        fix="strip the component prefix first and pass the tower's real number of layers",
    )


def open_clip_to_hf(state_dict: Mapping[str, torch.Tensor], *, num_layers: int) -> dict[str, torch.Tensor]:
    """An open_clip text tower (prefix stripped) in the transformers CLIP layout."""
    renames = _renames(num_layers)
    fused = _fused(num_layers)
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for key, tensor in state_dict.items():
        if key in renames:
            out[renames[key]] = tensor
        elif key in fused:
            if tensor.shape[0] % 3:
                unknown.append(f"{key} (dim 0 of {tuple(tensor.shape)} is not 3 x width)")
                continue
            for name, part in zip(fused[key], tensor.chunk(3, dim=0), strict=True):
                out[name] = part
        elif key == _PROJECTION_OC:
            out[_PROJECTION_HF] = tensor.t().contiguous()
        elif key not in OPEN_CLIP_IGNORED_KEYS and not key.startswith(OPEN_CLIP_IGNORED_PREFIXES):
            unknown.append(key)
    missing = [k for k in [*renames, *fused] if k not in state_dict]
    _refuse(unknown, missing, "open_clip", num_layers)
    return out


def hf_to_open_clip(state_dict: Mapping[str, torch.Tensor], *, num_layers: int) -> dict[str, torch.Tensor]:
    """The inverse of :func:`open_clip_to_hf`: a transformers CLIP text tower in open_clip's layout
    (for saving SD2 / SDXL checkpoints in their original naming)."""
    back = {hf: oc for oc, hf in _renames(num_layers).items()}
    fused = _fused(num_layers)
    parts = {name for names in fused.values() for name in names}
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for key, tensor in state_dict.items():
        if key in back:
            out[back[key]] = tensor
        elif key == _PROJECTION_HF:
            out[_PROJECTION_OC] = tensor.t().contiguous()
        elif key not in parts and key not in HF_IGNORED_KEYS:
            unknown.append(key)
    missing = [k for k in [*back, *parts] if k not in state_dict]
    _refuse(unknown, missing, "transformers", num_layers)
    for key, names in fused.items():
        out[key] = torch.cat([state_dict[name] for name in names], dim=0)
    return out
