"""``loadout generate --diffusion-model qwen_image_bf16.safetensors --text-encoder
qwen_2.5_vl_7b.safetensors --vae qwen_image_vae.safetensors`` makes a picture: files as artists have
them (Comfy-Org's layouts: the diffusion model in its released names, the text encoder as
``model.layers...`` at Qwen2.5-VL-7B's real 3584 width and vocabulary, one layer, the VAE in the
original Wan layout), through detection, the loaders, the session and the CLI, equal to the same
parts composed by hand (the composition `test_parity_qwen_image.py` proves against diffusers'
QwenImagePipeline)."""

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
from core.archs.catalog import TEXTS, codec_for
from core.archs.llm.towers import QWEN_IMAGE_QWEN25VL
from core.archs.protocols import ExtraInputs
from core.archs.wan_vae.keys import diffusers_to_original
from core.archs.wan_vae.network import WanVAEConfig
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.loading.loader import load_diffusion_model, load_text_encoder, load_vae
from core.models.llm import LlmConfig, LlmTextModel
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

PROMPT, SEED, STEPS = "a red fox in the snow", 7, 3


def _text_encoder(path: Path) -> Path:
    """Comfy-Org's ``text_encoders/qwen_2.5_vl_7b`` layout, bf16, drawn in bf16 (no float32 copy)."""
    cfg = LlmConfig.preset("qwen2.5-vl-7b")
    cfg = dataclasses.replace(cfg, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=256)
    gen = torch.Generator().manual_seed(2)
    state: dict[str, torch.Tensor] = {}
    for key, t in LlmTextModel(cfg, device="meta").state_dict().items():
        noise = torch.randn(t.shape, generator=gen, dtype=torch.bfloat16)
        if t.ndim == 1:
            state[key] = (0.1 * noise + (0.0 if key.endswith("bias") else 1.0)).contiguous()
        else:
            state[key] = (noise * t.shape[-1] ** -0.5).contiguous()
    save_file(state, str(path))
    return path


def _files(folder: Path) -> tuple[Path, Path, Path]:
    import diffusers

    from tests.core.archs.test_wan_vae_parity import _random_reference
    from tests.core.generate.reference_qwen_image import ours_from, qwen_image_reference

    text = _text_encoder(folder / "qwen_2.5_vl_7b.safetensors")
    dit = ours_from(qwen_image_reference(dim=256, heads=2, layers=2, seed=3))
    model = folder / "qwen_image_bf16.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in dit.state_dict().items()}, str(model))
    vae = _random_reference(diffusers.AutoencoderKLQwenImage).state_dict()
    original = diffusers_to_original(vae, WanVAEConfig(num_res_blocks=1))
    ae = folder / "qwen_image_vae.safetensors"
    save_file({k: v.contiguous() for k, v in original.items()}, str(ae))
    return model, text, ae


def _by_hand(model: Path, text: Path, ae: Path) -> np.ndarray:
    spec = diffusion_spec("qwen-image")
    assert spec.text is not None
    convention = TEXTS[spec.text]
    encoder = load_text_encoder(text)
    assert encoder.family == "qwen2.5-vl-7b"
    tower = LlmTower.from_file(encoder.module, QWEN_IMAGE_QWEN25VL, text)  # type: ignore[arg-type]
    cond = convention.network_inputs(
        convention.combine({"qwen25_7b": tower.encode(PROMPT)}), ExtraInputs(64, 64)
    )
    del encoder, tower
    fmt = latent_format_for("qwen-image")
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    dit = load_diffusion_model(model).module
    latent = sample(
        NetworkAdapter(dit, convention="qwen_image"), from_spec(spec.sampling, "qwen-image"), fmt,
        empty_latent(1, 64, 64, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        pixels = codec_for("qwen-image").decode(load_vae(ae).module, latent)
    return to_uint8_rgb(pixels[0].float())


def test_loadout_generate_makes_a_qwen_image_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae = _files(tmp_path)
    out = tmp_path / "fox.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--steps", str(STEPS), "--cfg", "1", "--scheduler", "simple", "--size", "64x64",
        "--seed", str(SEED), "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == [str(out)]
    image = Image.open(out)
    assert "Model: qwen_image_bf16" in image.text["parameters"]
    got = np.asarray(image.convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1
