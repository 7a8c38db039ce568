"""Generation with a GGUF diffusion model plus separate text-encoder and VAE files, as ComfyUI-GGUF
users load them (UNETLoader-GGUF, CLIPLoader, VAELoader)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from app.demo import DemoLibrary
from core.generate.command import generate_files
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.gguf_quant import write_comfy_gguf


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> tuple[Path, Path, Path, Path]:
    demo: DemoLibrary = demo_library_at(tmp_path_factory.mktemp("demo"))
    d = tmp_path_factory.mktemp("split")
    tensors = load_file(str(demo.checkpoint))

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v.contiguous() for k, v in tensors.items() if k.startswith(prefix)}

    unet = write_comfy_gguf(d / "unet-Q8_0.gguf", "sd1", part("model.diffusion_model."), "Q8_0")[0]
    save_file(part("cond_stage_model.transformer."), str(d / "clip_l.safetensors"))
    save_file(part("first_stage_model."), str(d / "vae.safetensors"))
    return demo.checkpoint, unet, d / "clip_l.safetensors", d / "vae.safetensors"


def test_a_gguf_unet_with_separate_clip_and_vae_makes_a_picture(
    parts: tuple[Path, Path, Path, Path], tmp_path: Path
) -> None:
    checkpoint, unet, clip, vae = parts
    settings = ImageSettings("a fox", "blurry", Sampling(seed=5, steps=3), 64, 64)
    split = generate_files(
        GenerateRequest(
            ModelFiles(diffusion_model=unet, text_encoders=(clip,), vae=vae),
            settings,
            output=tmp_path / "gguf.png",
            vram_limit=8 << 20,
        )
    )
    whole = generate_files(
        GenerateRequest(ModelFiles(checkpoint=checkpoint), settings, output=tmp_path / "fp16.png")
    )
    a = np.asarray(Image.open(split.images[0].path), dtype=np.float32)
    b = np.asarray(Image.open(whole.images[0].path), dtype=np.float32)
    assert a.shape == b.shape == (64, 64, 3)
    # Q8_0 keeps the picture close to the fp16 model's (the weights differ by the quantization only)
    assert np.abs(a - b).mean() < 8.0
    assert {e["role"] for e in split.events} >= {"text_encoder", "diffusion_model", "vae"}
