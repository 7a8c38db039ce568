"""Real-size random-weight files for the Z-Image picture bench (``bench.zimage --picture``).

Each file has a released model's key layout and true shapes, stored as the ``*_fp8_scaled`` files
are (``bench.load.formatted``: ComfyUI's ``scaled_fp8`` marker, every linear matrix float8_e4m3fn
with a float32 ``scale_weight``; the embeddings, norms and biases bf16), with values that keep a
30-layer forward finite (``bench.random_files``: each weight N(0, 1/fan-in), as the ``--random``
model draws it). Written once to a temporary name, kept while the header and size match.
"""

from __future__ import annotations

from pathlib import Path

from bench.random_files import shapes, write_random

__all__ = ["picture_files", "shapes", "write_random"]


def picture_files(folder: Path) -> tuple[Path, Path, Path]:
    """Z-Image Turbo (6.15 B) and Qwen3-4B in the fp8-scaled layout, the Flux VAE in bf16."""
    from bench.load import formatted
    from core.models.llm import LlmConfig, LlmTextModel
    from core.models.nextdit import NextDiT, NextDiTConfig
    from tests.fixtures.diffusion_layouts_components import kl_vae

    dit = write_random(
        folder / "z_image_turbo_fp8_scaled_random.safetensors",
        formatted(shapes(NextDiT(NextDiTConfig(), device="meta")), "fp8"),
        seed=1,
    )
    text = write_random(
        folder / "qwen3-4b_fp8_scaled_random.safetensors",  # the name bench.load measures
        formatted(shapes(LlmTextModel(LlmConfig.preset("qwen3-4b"), device="meta")), "fp8"),
        seed=2,
    )
    vae = write_random(
        folder / "ae_random.safetensors", formatted(dict(kl_vae(z=16, quant_conv=False)), "bf16"), seed=3
    )
    return dit, text, vae
