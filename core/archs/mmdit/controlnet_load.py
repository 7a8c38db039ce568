"""Which SD3 ControlNet a file is, from its tensor shapes, and how its keys make the module's.

Two release layouts (``core.detect.diffusion._sd3_controlnet`` names them):

* ``"diffusers"``: diffusers' ``SD3ControlNetModel`` with joint blocks (InstantX, alimama): loaded
  into :class:`~core.archs.mmdit.controlnet.JointControlNet`, q/k/v fused as the MMDiT's diffusers
  layout is (:mod:`core.archs.mmdit.keys`);
* ``"original"``: Stability's SD3.5 ControlNet files (``sd3.5_large_controlnet_canny.safetensors``
  ...): :class:`~core.archs.mmdit.controlnet.SD35ControlNet`, the file's own names (its timestep
  and pooled embedders under ComfyUI's or diffusers' names).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from core.archs.control import ControlModule, ControlNetLoader
from core.archs.keymaps import KeyMapping, linear
from core.archs.mmdit.controlnet import JointControlNet, SD35ControlConfig, SD35ControlNet
from core.archs.mmdit.keys import embedder_rows, joint_block_rows
from core.detect.catalog import REGISTRY
from core.detect.types import Detection
from core.models.mmdit import MMDiTConfig

Shapes = Mapping[str, tuple[int, ...]]
#: diffusers' names of the embedders Stability's files may use (ComfyUI's ``MMDIT_MAP_BASIC``)
_EMBEDDERS = {
    "t_embedder.mlp.0": "time_text_embed.timestep_embedder.linear_1",
    "t_embedder.mlp.2": "time_text_embed.timestep_embedder.linear_2",
    "y_embedder.mlp.0": "time_text_embed.text_embedder.linear_1",
    "y_embedder.mlp.2": "time_text_embed.text_embedder.linear_2",
}


def _numbered(shapes: Shapes, prefix: str, suffix: str) -> int:
    pattern = re.compile(rf"{re.escape(prefix)}(\d+)\.{re.escape(suffix)}$")
    found = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    if not found or found != set(range(max(found) + 1)):
        raise KeyError(f"{prefix}N.{suffix} is missing or not numbered 0..N")
    return max(found) + 1


def joint_config(shapes: Shapes) -> tuple[MMDiTConfig, int]:
    """A diffusers joint-block SD3 ControlNet's network (depth = its blocks) and hint channels."""
    hidden, in_channels, patch, _ = shapes["pos_embed.proj.weight"]
    if "pos_embed.pos_embed" not in shapes:
        raise ValueError("it has no position table (pos_embed.pos_embed): made without pos_embed_max_size")
    positions = shapes["pos_embed.pos_embed"][1]
    size = math.isqrt(positions)
    if size * size != positions:
        raise ValueError(f"its position table of {positions} is not square")
    blocks = _numbered(shapes, "transformer_blocks.", "attn.to_q.weight")
    norm = shapes.get("transformer_blocks.0.attn.norm_q.weight")
    head_dim = int(norm[0]) if norm is not None else 64
    dual = tuple(i for i in range(blocks) if f"transformer_blocks.{i}.attn2.to_q.weight" in shapes)
    config = MMDiTConfig(
        depth=blocks, num_heads=int(hidden) // head_dim, head_dim=head_dim, patch_size=int(patch),
        in_channels=int(in_channels), out_channels=int(in_channels), pos_embed_max_size=size,
        context_dim=int(shapes["context_embedder.weight"][1]),
        adm_in_channels=int(shapes["time_text_embed.text_embedder.linear_1.weight"][1]),
        mlp_ratio=int(shapes["transformer_blocks.0.ff.net.0.proj.weight"][0]) / int(hidden),
        qk_norm="rms" if norm is not None else None, dual_attention_layers=dual,
    )  # fmt: skip
    return config, int(shapes["pos_embed_input.proj.weight"][1])


def joint_rows(module: JointControlNet) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`JointControlNet` from diffusers' ``SD3ControlNetModel`` keys."""
    config = module.config
    rows = embedder_rows(config)
    for i in range(config.depth):
        rows += joint_block_rows(config, i, last=False)
        rows += linear(f"controlnet_blocks.{i}", f"controlnet_blocks.{i}")
    rows += linear("pos_embed_input.proj", "pos_embed_input.proj")
    return tuple(rows)


def sd35_config(shapes: Shapes) -> tuple[SD35ControlConfig, dict[str, str]]:
    """Stability's SD3.5 ControlNet and the file's names of its embedders."""
    names = {ours: theirs for ours, theirs in _EMBEDDERS.items() if f"{theirs}.weight" in shapes}
    y = shapes[f"{names.get('y_embedder.mlp.0', 'y_embedder.mlp.0')}.weight"]
    if y[0] == y[1]:
        raise ValueError(
            "it embeds the pooled text twice (ComfyUI's double_y_emb ControlNet), "
            "which Loadout does not load yet"
        )
    hint = shapes["pos_embed_input.proj.weight"]
    blocks = _numbered(shapes, "transformer_blocks.", "attn.qkv.weight")
    config = SD35ControlConfig(
        hidden=int(hint[0]), adm=int(y[1]), blocks=blocks,
        hint_channels=int(hint[1]), patch_size=int(hint[2]),
        mlp_ratio=int(shapes["transformer_blocks.0.mlp.fc1.weight"][0]) / int(hint[0]),
        control_type=shapes.get("control_type"),
    )  # fmt: skip
    if config.hidden % 64:
        raise ValueError(f"its width {config.hidden} is not a whole number of 64-wide heads")
    return config, names


def sd35_key_map(module: SD35ControlNet) -> dict[str, str]:
    out = {}
    for key in module.state_dict(keep_vars=True):
        prefix = next((p for p in module.file_names if key.startswith(p + ".")), None)
        out[key] = key if prefix is None else module.file_names[prefix] + key[len(prefix) :]
    return out


def build(shapes: Shapes, det: Detection) -> ControlModule:
    if det.layout == "original":
        sd35, names = sd35_config(shapes)
        return SD35ControlNet(sd35, names=names, device="meta")
    joint, hint = joint_config(shapes)
    return JointControlNet(joint, hint, device="meta")


def _rows(module: Any) -> tuple[KeyMapping, ...] | None:
    return joint_rows(module) if isinstance(module, JointControlNet) else None


def _keys(module: Any) -> Mapping[str, str]:
    assert isinstance(module, SD35ControlNet)
    return sd35_key_map(module)


CONTROLNET = ControlNetLoader(
    id="mmdit-controlnet",
    families=tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "mmdit"),
    build=build,
    key_map=_keys,
    layouts=("diffusers", "original"),
    key_rows=_rows,
)
