"""Real-width, few-layer CLIP vision files for the image-prompt tests (transformers' own model,
random weights, saved as ComfyUI's models/clip_vision files are)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

VIT_H = {"hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 16, "projection_dim": 1024}
#: ViT-bigG/14 (open_clip's laion2B-39B-b160k, h94's sdxl_models/image_encoder): what ip-adapter_sdxl reads
VIT_BIGG = {"hidden_size": 1664, "intermediate_size": 8192, "num_attention_heads": 16, "projection_dim": 1280}


_RENAMES = (
    ("ln_1", "layer_norm1"),
    ("ln_2", "layer_norm2"),
    ("attn.out_proj", "self_attn.out_proj"),
    ("mlp.c_fc", "mlp.fc1"),
    ("mlp.c_proj", "mlp.fc2"),
)


def vision_reference(
    layers: int = 2, seed: int = 0, widths: dict[str, int] = VIT_H
) -> CLIPVisionModelWithProjection:
    torch.manual_seed(seed)
    cfg = CLIPVisionConfig(
        **widths, num_hidden_layers=layers, patch_size=14, image_size=224, hidden_act="gelu"
    )
    return CLIPVisionModelWithProjection(cfg).eval()


def save_transformers(model: CLIPVisionModelWithProjection, path: Path) -> Path:
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def save_open_clip(model: CLIPVisionModelWithProjection, path: Path) -> Path:
    """The same tower in open_clip's layout under ``visual.`` (q/k/v fused, the projection as x @ P)."""
    sd, out = model.state_dict(), {}
    emb = "vision_model.embeddings."
    out["visual.class_embedding"] = sd[emb + "class_embedding"]
    out["visual.conv1.weight"] = sd[emb + "patch_embedding.weight"]
    out["visual.positional_embedding"] = sd[emb + "position_embedding.weight"]
    for new, old in (("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")):
        for p in ("weight", "bias"):
            out[f"visual.{new}.{p}"] = sd[f"vision_model.{old}.{p}"]
    out["visual.proj"] = sd["visual_projection.weight"].t()
    for i in range(model.config.num_hidden_layers):
        hf, oc = f"vision_model.encoder.layers.{i}.", f"visual.transformer.resblocks.{i}."
        for new, old in _RENAMES:
            for p in ("weight", "bias"):
                out[f"{oc}{new}.{p}"] = sd[f"{hf}{old}.{p}"]
        for p in ("weight", "bias"):
            qkv = [sd[f"{hf}self_attn.{n}_proj.{p}"] for n in "qkv"]
            out[f"{oc}attn.in_proj_{p}"] = torch.cat(qkv)
    out["logit_scale"] = torch.tensor(4.6)  # a whole open_clip dump's: not part of the tower
    save_file({k: v.contiguous() for k, v in out.items()}, str(path))
    return path
