"""``loadout generate --diffusion-model qwen_image_edit_2509_bf16.safetensors --text-encoder
qwen_2.5_vl_7b.safetensors --vae qwen_image_vae.safetensors --reference fox.png`` edits a picture:
files as artists have them (Comfy-Org's layouts: the text encoder with its vision tower,
``visual.*``, beside ``model.*``, both at their real widths, one layer each), through detection (the
file name tells Edit 2509 from Qwen-Image), the loaders, the references pass, the session and the
CLI, equal to the same parts composed by hand (the composition
``test_parity_qwen_image_edit.py`` proves against diffusers' QwenImageEditPlusPipeline).

The family's reference rule scales each picture to 1024 x 1024 px of area before the VAE; here
``--keep-reference-size`` keeps the picture's 64 x 64 (the rule is tested on its own in
``test_references.py``) so the test's VAE encodes a small picture."""

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
from core.archs.conditioning import Conditioning
from core.archs.llm.towers import QWEN_IMAGE_EDIT_QWEN25VL
from core.archs.protocols import ExtraInputs
from core.archs.wan_vae.keys import diffusers_to_original
from core.archs.wan_vae.network import WanVAEConfig
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.loading.loader import load_diffusion_model, load_text_encoder, load_vae
from core.models.llm import LlmConfig, LlmTextModel
from core.models.llm.vision import VisionConfig
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

PROMPT, SEED, STEPS, FAMILY = "give the fox a red scarf", 7, 2, "qwen-image-edit"


def _text_encoder(path: Path) -> Path:
    """Comfy-Org's ``qwen_2.5_vl_7b`` layout with its vision tower (one block), bf16."""
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen2.5-vl-7b"), num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=256,
        vision=VisionConfig(depth=1),
    )  # fmt: skip
    gen = torch.Generator().manual_seed(2)
    state: dict[str, torch.Tensor] = {}
    for key, t in LlmTextModel(cfg, device="meta").state_dict().items():
        noise = torch.randn(t.shape, generator=gen, dtype=torch.bfloat16)
        if t.ndim == 1:
            state[key] = (0.1 * noise + (0.0 if key.endswith("bias") else 1.0)).contiguous()
        else:
            state[key] = (noise * t[0].numel() ** -0.5).contiguous()
    assert any(k.startswith("visual.blocks.0.") for k in state)
    save_file(state, str(path))
    return path


def _files(folder: Path) -> tuple[Path, Path, Path, Path]:
    import diffusers

    from tests.core.archs.test_wan_vae_parity import _random_reference
    from tests.core.generate.reference_qwen_image import ours_from, qwen_image_reference

    text = _text_encoder(folder / "qwen_2.5_vl_7b.safetensors")
    dit = ours_from(qwen_image_reference(dim=256, heads=2, layers=2, seed=3))
    model = folder / "qwen_image_edit_2509_bf16.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in dit.state_dict().items()}, str(model))
    vae = _random_reference(diffusers.AutoencoderKLQwenImage).state_dict()
    ae = folder / "qwen_image_vae.safetensors"
    save_file(
        {k: v.contiguous() for k, v in diffusers_to_original(vae, WanVAEConfig(num_res_blocks=1)).items()},
        str(ae),
    )
    y, x = np.mgrid[0:64, 0:64]
    picture = folder / "fox.png"
    Image.fromarray((np.stack([x * 4, y * 4, (x + y) * 2], axis=-1) % 256).astype(np.uint8)).save(picture)
    return model, text, ae, picture


def _by_hand(model: Path, text: Path, ae: Path, picture: Path) -> np.ndarray:
    spec = diffusion_spec(FAMILY)
    assert spec.text == "qwen_image_edit"
    convention = TEXTS[spec.text]
    pixels = torch.from_numpy(np.array(Image.open(picture).convert("RGB"))).permute(2, 0, 1).float() / 255
    encoder = load_text_encoder(text)
    tower = LlmTower.from_file(encoder.module, QWEN_IMAGE_EDIT_QWEN25VL, text)  # type: ignore[arg-type]
    base = convention.network_inputs(
        convention.combine({"qwen25_7b": tower.encode(PROMPT, [pixels])}), ExtraInputs(64, 64)
    )
    del encoder, tower
    fmt = latent_format_for(FAMILY)
    vae = load_vae(ae).module
    codec = codec_for(FAMILY)
    with torch.no_grad():
        reference = fmt.process_in(codec.encode(vae, pixels[None] * 2 - 1))
    cond = Conditioning(base.context, mask=base.mask, references=(reference,))
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    dit = load_diffusion_model(model).module
    latent = sample(
        NetworkAdapter(dit, convention="qwen_image"), from_spec(spec.sampling, FAMILY), fmt,
        empty_latent(1, 64, 64, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        return to_uint8_rgb(codec.decode(vae, latent)[0].float())


def test_loadout_generate_edits_a_picture_with_qwen_image_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae, picture = _files(tmp_path)
    out = tmp_path / "edit.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--reference", str(picture), "--keep-reference-size", "--steps", str(STEPS),
        "--cfg", "1",
        "--scheduler", "simple", "--size", "64x64", "--seed", str(SEED), "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == [str(out)]
    image = Image.open(out)
    assert "Model: qwen_image_edit_2509_bf16" in image.text["parameters"]
    assert 'References: "fox.png: ' in image.text["parameters"]
    got = np.asarray(image.convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae, picture).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1
