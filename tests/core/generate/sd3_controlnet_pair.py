"""diffusers' SD3ControlNetModel (random weights) and the release files made of it, for the SD3 /
SD3.5 ControlNet tests: the diffusers file as ``save_pretrained`` writes it (InstantX's layout) and
Stability's SD3.5 layout (``sd3.5_large_controlnet_*.safetensors``), which diffusers'
``scripts/convert_sd3_controlnet_to_diffusers.py`` reads: fused ``attn.qkv``, ``attn.proj``,
``mlp.fc1``/``fc2``, ``adaLN_modulation.1`` per block, the embedders under diffusers' names, and
``control_type`` (blur 0, canny 1, depth 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.core.generate.reference import randomize
from tests.fixtures.st_files import write_tensors


def joint_controlnet(heads: int, layers: int, *, context: int, pooled: int, seed: int, **extra: Any) -> Any:
    """InstantX's kind: joint blocks ``heads`` x 64 wide, its own embedders (position table 16 wide)."""
    import diffusers

    with no_init():
        cn = diffusers.SD3ControlNetModel(
        sample_size=16, patch_size=2, in_channels=16, num_layers=layers, attention_head_dim=64,
        num_attention_heads=heads, joint_attention_dim=context, caption_projection_dim=heads * 64,
        pooled_projection_dim=pooled, out_channels=16, pos_embed_max_size=16, **extra,
    )  # fmt: skip
    return randomize(cn, seed)


def sd35_controlnet(heads: int, layers: int, *, pooled: int, seed: int) -> Any:
    """Stability's SD3.5 kind as diffusers converts it: picture-only blocks, no position embedding
    nor context embedder of its own."""
    import diffusers

    with no_init():
        cn = diffusers.SD3ControlNetModel(
        patch_size=2, in_channels=16, num_layers=layers, attention_head_dim=64, num_attention_heads=heads,
        joint_attention_dim=None, caption_projection_dim=heads * 64, pooled_projection_dim=pooled,
        out_channels=16, pos_embed_max_size=None, pos_embed_type=None, use_pos_embed=False,
        force_zeros_for_pooled_projection=False,
    )  # fmt: skip
    return randomize(cn, seed)


def no_init() -> Any:
    """diffusers' own switch that leaves new weights uninitialised (``randomize`` sets every one):
    a 1536-wide block's default initialisation costs seconds."""
    from diffusers.models.modeling_utils import no_init_weights

    return no_init_weights()


def diffusers_file(cn: Any, path: Path) -> Path:
    return write_tensors(path, {k: v.detach().clone().contiguous() for k, v in cn.state_dict().items()})


def stability_state(cn: Any, control_type: int | None) -> dict[str, torch.Tensor]:
    """The diffusers SD3.5 ControlNet's tensors under Stability's names (the conversion script
    backwards)."""
    sd = cn.state_dict()
    out = {
        k: v
        for k, v in sd.items()
        if k.startswith(("time_text_embed.", "controlnet_blocks.", "pos_embed_input."))
    }
    blocks = {k.split(".")[1] for k in sd if k.startswith("transformer_blocks.")}
    for i in sorted(blocks, key=int):
        d, o = f"transformer_blocks.{i}", f"transformer_blocks.{i}"
        for p in ("weight", "bias"):
            out[f"{o}.attn.qkv.{p}"] = torch.cat([sd[f"{d}.attn.to_{x}.{p}"] for x in "qkv"])
            out[f"{o}.attn.proj.{p}"] = sd[f"{d}.attn.to_out.0.{p}"]
            out[f"{o}.mlp.fc1.{p}"] = sd[f"{d}.ff.net.0.proj.{p}"]
            out[f"{o}.mlp.fc2.{p}"] = sd[f"{d}.ff.net.2.{p}"]
            out[f"{o}.adaLN_modulation.1.{p}"] = sd[f"{d}.norm1.linear.{p}"]
    if control_type is not None:
        out["control_type"] = torch.tensor([control_type], dtype=torch.int32)
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def stability_file(cn: Any, path: Path, control_type: int | None = 1) -> Path:
    return write_tensors(path, stability_state(cn, control_type))


def comfy_sincos(dim: int, w: int, h: int) -> torch.Tensor:
    """ComfyUI's SD3.5 ControlNet grid (``linspace(-v + 7.5, v + 7.5)``, v = 7.5 along the shorter
    side) through diffusers' own sin-cos of a grid (w first, as ComfyUI concatenates)."""
    from diffusers.models.embeddings import get_2d_sincos_pos_embed_from_grid

    small = min(h, w)
    vh, vw = h / small * 7.5, w / small * 7.5
    gh, gw = torch.meshgrid(
        torch.linspace(7.5 - vh, 7.5 + vh, h), torch.linspace(7.5 - vw, 7.5 + vw, w), indexing="ij"
    )
    grid = torch.stack([gw, gh]).reshape(2, 1, h, w)
    return get_2d_sincos_pos_embed_from_grid(dim, grid, output_type="pt").float()
