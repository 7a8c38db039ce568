"""Where each weight of :class:`~.net.DepthAnythingV2` lives in the two layouts files come in:

* ``original``: the Depth-Anything-V2 repository's state dict (``pretrained.blocks.N.attn.qkv``,
  ``depth_head.scratch.refinenet4...``), the ``depth_anything_v2_vit{s,b,l}`` files
  comfyui_controlnet_aux loads (and their safetensors conversions);
* ``transformers``: ``DepthAnythingForDepthEstimation`` saved by transformers
  (``backbone.encoder.layer.N.attention.attention.query``, ``neck.fusion_stage.layers.0...``).

A source is ``(file key, part)``: ``part`` is None for a tensor taken whole, or 0/1/2 for the
query/key/value third of the original's fused ``qkv`` rows (a view: no copy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from core.archs.depth_anything.net import DepthAnythingConfig

Shapes = Mapping[str, tuple[int, ...]]
Source = tuple[str, int | None]
#: keys a file carries that the network does not use (DINOv2's masked-training token)
UNUSED = {"original": ("pretrained.mask_token",), "transformers": ("backbone.embeddings.mask_token",)}
_QKV = ("q", "k", "v")
_HF_QKV = ("query", "key", "value")


def _blocks(shapes: Shapes, prefix: str) -> int:
    n = 0
    while f"{prefix}{n}.norm1.weight" in shapes:
        n += 1
    return n


def config_from_shapes(shapes: Shapes, layout: str) -> DepthAnythingConfig:
    """The network a file holds, from its shapes (KeyError/ValueError when it is not complete)."""
    if layout == "original":
        table, fc1, blocks = (
            "pretrained.pos_embed",
            "pretrained.blocks.0.mlp.fc1.weight",
            "pretrained.blocks.",
        )
        feat, proj = "depth_head.scratch.layer1_rn.weight", "depth_head.projects.{i}.weight"
        position_rule = "dinov2"
    else:
        table = "backbone.embeddings.position_embeddings"
        fc1, blocks = "backbone.encoder.layer.0.mlp.fc1.weight", "backbone.encoder.layer."
        feat, proj = "neck.convs.0.weight", "neck.reassemble_stage.layers.{i}.projection.weight"
        position_rule = "transformers"
    positions = shapes[table]
    grid = math.isqrt(positions[1] - 1)
    if grid * grid != positions[1] - 1:
        raise ValueError(f"{table} holds {positions[1] - 1} positions, not a square grid")
    return DepthAnythingConfig(
        width=positions[2], depth=_blocks(shapes, blocks), mlp=shapes[fc1][0], grid=grid,
        features=shapes[feat][0],
        out_channels=tuple(shapes[proj.format(i=i)][0] for i in range(4)),  # type: ignore[arg-type]
        position_rule=position_rule,
    )  # fmt: skip


def _pairs(prefix: str, src: str, names: tuple[str, ...] = ("weight", "bias")) -> dict[str, Source]:
    return {f"{prefix}.{n}": (f"{src}.{n}", None) for n in names}


def original_sources(cfg: DepthAnythingConfig) -> dict[str, Source]:
    """Module key -> source in the original layout."""
    out: dict[str, Source] = {}
    for i in range(cfg.depth):
        b = f"pretrained.blocks.{i}"
        for part, name in enumerate(_QKV):
            for p in ("weight", "bias"):
                out[f"{b}.attn.{name}.{p}"] = (f"{b}.attn.qkv.{p}", part)
    return out  # every other key is the module's own name (see :func:`sources`)


def transformers_sources(cfg: DepthAnythingConfig) -> dict[str, Source]:
    """Module key -> source in the transformers layout."""
    out: dict[str, Source] = {
        "pretrained.cls_token": ("backbone.embeddings.cls_token", None),
        "pretrained.pos_embed": ("backbone.embeddings.position_embeddings", None),
        **_pairs("pretrained.patch_embed.proj", "backbone.embeddings.patch_embeddings.projection"),
        **_pairs("pretrained.norm", "backbone.layernorm"),
    }
    for i in range(cfg.depth):
        b, h = f"pretrained.blocks.{i}", f"backbone.encoder.layer.{i}"
        for mine, theirs in zip(_QKV, _HF_QKV, strict=True):
            out |= _pairs(f"{b}.attn.{mine}", f"{h}.attention.attention.{theirs}")
        out |= _pairs(f"{b}.attn.proj", f"{h}.attention.output.dense")
        for n in ("norm1", "norm2", "mlp.fc1", "mlp.fc2"):
            out |= _pairs(f"{b}.{n}", f"{h}.{n}")
        out[f"{b}.ls1.gamma"] = (f"{h}.layer_scale1.lambda1", None)
        out[f"{b}.ls2.gamma"] = (f"{h}.layer_scale2.lambda1", None)
    for i in range(4):
        out |= _pairs(f"depth_head.projects.{i}", f"neck.reassemble_stage.layers.{i}.projection")
        if i != 2:
            out |= _pairs(f"depth_head.resize_layers.{i}", f"neck.reassemble_stage.layers.{i}.resize")
        out[f"depth_head.scratch.layer{i + 1}_rn.weight"] = (f"neck.convs.{i}.weight", None)
        fuse, theirs = f"depth_head.scratch.refinenet{4 - i}", f"neck.fusion_stage.layers.{i}"
        out |= _pairs(f"{fuse}.out_conv", f"{theirs}.projection")
        for unit in (1, 2):
            for conv in (1, 2):
                out |= _pairs(
                    f"{fuse}.resConfUnit{unit}.conv{conv}", f"{theirs}.residual_layer{unit}.convolution{conv}"
                )
    out |= _pairs("depth_head.scratch.output_conv1", "head.conv1")
    out |= _pairs("depth_head.scratch.output_conv2.0", "head.conv2")
    out |= _pairs("depth_head.scratch.output_conv2.2", "head.conv3")
    return out


def sources(cfg: DepthAnythingConfig, layout: str, module_keys: list[str]) -> dict[str, Source]:
    """Module key -> source for every key of the module."""
    named = original_sources(cfg) if layout == "original" else transformers_sources(cfg)
    return {k: named.get(k, (k, None)) for k in module_keys}


def file_shapes_as_module(
    shapes: Shapes, mapped: Mapping[str, Source], layout: str
) -> dict[str, tuple[int, ...]]:
    """The file's shapes under the module's names (a third of the fused rows for q/k/v), plus the
    file keys no source names under their own names, for the key-by-key comparison."""
    out: dict[str, tuple[int, ...]] = {}
    used = set(UNUSED[layout])
    for mine, (key, part) in mapped.items():
        if key not in shapes:
            continue
        used.add(key)
        shape = shapes[key]
        out[mine] = shape if part is None else (shape[0] // 3, *shape[1:])
    out |= {k: tuple(s) for k, s in shapes.items() if k not in used}
    return out
