"""Real-size random-weight files for the Qwen-Image picture bench (``bench.qwen_image``), in
Comfy-Org's layouts and dtypes, their shapes taken from the project's own modules (so detection
sees them as it sees the released files):

- ``qwen_image_fp8_e4m3fn.safetensors``: the 60-layer 3072-wide MMDiT (20.43 B parameters),
  *plain* fp8 as Comfy-Org ships it (no ``scaled_fp8`` marker, no ``scale_weight``: a cast, 1 byte a
  parameter): every matrix float8_e4m3fn holding N(0, 1/fan-in) itself, biases and norms bf16;
- ``qwen_2.5_vl_7b_fp8_scaled.safetensors``: Qwen2.5-VL-7B with its vision tower (``visual.*``),
  ComfyUI's ``scaled_fp8`` layout (``bench.load.formatted``): linear matrices fp8 with a float32
  scale, the token embedding, the patch embedding, norms and biases bf16, and the unused
  ``lm_head`` bf16 (the released file's 9.38 GB is this layout with it; Loadout drops it unread);
- ``qwen_image_vae.safetensors``: the Wan 2.1 VAE in its original layout, bf16.

``layers`` / ``vision_depth`` shrink the depth (for a test); the widths stay real.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.random_files import shapes, write_random

NAMES = (
    "qwen_image_fp8_e4m3fn.safetensors",
    "qwen_2.5_vl_7b_fp8_scaled.safetensors",
    "qwen_image_vae.safetensors",
)


def plain_fp8(layout: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """A cast to fp8 as ``*_fp8_e4m3fn`` files are: matrices fp8, vectors bf16, no scales."""
    return {k: ("F8_E4M3" if len(v) >= 2 else "BF16", tuple(v)) for k, v in layout.items()}


def layouts(layers: int = 60, text_layers: int = 28, vision_depth: int = 32) -> tuple[dict, dict, dict]:
    from bench.load import formatted
    from core.archs.wan_vae.network import WanVAE, WanVAEConfig
    from core.models.llm import LlmConfig, LlmTextModel
    from core.models.llm.vision import VisionConfig
    from core.models.qwen_image import QwenImageConfig, QwenImageDiT

    dit = shapes(QwenImageDiT(QwenImageConfig(n_layers=layers), device="meta"))
    base = LlmConfig.preset("qwen2.5-vl-7b")
    vision = dataclasses.replace(
        VisionConfig(),
        depth=vision_depth,
        full_attention=tuple(i for i in (7, 15, 23, 31) if i < vision_depth),
    )
    llm = LlmTextModel(dataclasses.replace(base, num_layers=text_layers, vision=vision), device="meta")
    text = formatted(shapes(llm), "fp8")
    text["lm_head.weight"] = ("BF16", (base.vocab_size, base.hidden_size))
    vae = shapes(WanVAE(WanVAEConfig()))
    return plain_fp8(dit), text, formatted(vae, "bf16")


def picture_files(folder: Path, **depths: int) -> tuple[Path, Path, Path]:
    dit, text, vae = layouts(**depths)
    return (
        write_random(folder / NAMES[0], dit, seed=11),
        write_random(folder / NAMES[1], text, seed=12),
        write_random(folder / NAMES[2], vae, seed=13),
    )
