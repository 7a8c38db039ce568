"""``loadout generate --diffusion-model z_image_turbo.safetensors --text-encoder qwen_3_4b.safetensors
--vae ae.safetensors`` makes a picture: files as artists have them (Comfy-Org's layouts; the Qwen3
encoder at its real 2560 width and vocabulary, two layers; a small Z-Image and Flux-format VAE),
through detection, the loaders, the session and the CLI, equal to the same parts composed by hand
(the composition `test_parity_nextdit.py` proves against diffusers' ZImagePipeline)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.archs.catalog import TEXTS
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.loading.loader import load_diffusion_model, load_text_encoder, load_vae
from core.models.llm import LlmConfig
from core.models.vae import FLUX_LATENT
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import Z_IMAGE_QWEN3, LlmTower
from tests.core.generate.reference import vae_pair
from tests.core.generate.reference_nextdit import ours_from, z_image_reference
from tests.fixtures.llm_files import random_state, write_comfy

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

PROMPT, SEED, STEPS = "a red fox in the snow", 7, 3


def _files(folder: Path) -> tuple[Path, Path, Path]:
    cfg = LlmConfig.preset("qwen3-4b")
    cfg = dataclasses.replace(cfg, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=256)
    text = write_comfy(folder / "qwen_3_4b.safetensors", random_state(cfg))
    dit = ours_from(z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=2560, seed=3))
    model = folder / "z_image_turbo.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in dit.state_dict().items()}, str(model))
    _, vae = vae_pair(16, FLUX_LATENT, seed=4)
    ae = folder / "ae.safetensors"
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(ae))
    return model, text, ae


def _by_hand(model: Path, text: Path, ae: Path) -> np.ndarray:
    spec = diffusion_spec("z-image")
    assert spec.text is not None
    convention = TEXTS[spec.text]
    tower = LlmTower.from_file(load_text_encoder(text).module, Z_IMAGE_QWEN3, text)  # type: ignore[arg-type]
    cond = convention.network_inputs(
        convention.combine({"qwen3_4b": tower.encode(PROMPT)}), ExtraInputs(64, 64)
    )
    fmt = latent_format_for("z-image")
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    dit = load_diffusion_model(model).module
    latent = sample(
        NetworkAdapter(dit, convention="nextdit"), from_spec(spec.sampling, "z-image"), fmt,
        empty_latent(1, 64, 64, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        pixels = load_vae(ae).module.decode(latent, scaled=False)
    return to_uint8_rgb(pixels[0].float())


def test_loadout_generate_makes_a_z_image_picture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, text, ae = _files(tmp_path)
    out = tmp_path / "fox.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--steps", str(STEPS), "--cfg", "1", "--sampler", "euler",
        "--scheduler", "simple", "--size", "64x64",
        "--seed", str(SEED), "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == [str(out)]
    image = Image.open(out)
    assert "Model: z_image_turbo" in image.text["parameters"]
    got = np.asarray(image.convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1
