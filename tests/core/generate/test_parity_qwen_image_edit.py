"""The Qwen-Image-Edit picture against diffusers' ``QwenImageEditPlusPipeline`` (2509) and
``QwenImageEditPipeline`` (the original, August 2025) (test-only references), set up as ComfyUI
computes, as tests/core/generate/test_parity_qwen_image.py does for Qwen-Image.

Ours runs the way a Loadout edit composes its parts: the ``qwen_image_edit`` convention's tower
(Qwen2.5-VL-7B's text model at its width and vocabulary, one layer, with a one-block vision tower
at its width: the picture read through it into the edit template; both proven against
transformers in tests/core/text/llm and tests/core/models/llm), the reference picture encoded by
the record's codec (the Wan VAE loaded from its original-layout file) into the Wan 2.1 latent
format as ``Conditioning.references``, the 2509 record's flow sampling (shift 3), ComfyUI's KSampler
(``euler``, ``simple``, CFG 1) and the MMDiT at its released width (one block). diffusers is given
what ComfyUI computes: the prompt's hidden states as the tower makes them (both drop the same 64
template tokens), ComfyUI's sigmas and CPU noise, the same reference picture -- at its own size: the
pipeline's VAE area (1024 x 1024 px, diffusers' and ComfyUI's) is set to the picture's, 64 x 64 px,
so the test's VAE runs on a small picture (the references' sizes are the workflow's; docs/text.md);
for the original Edit the vision tower's area (1024 x 1024 px, ComfyUI's ``TextEncodeQwenImageEdit``)
is set to the picture's too, and the pipeline's ``calculate_dimensions`` gives the picture's size.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.archs.catalog import TEXTS, codec_for
from core.archs.conditioning import Conditioning
from core.archs.llm.towers import QWEN_IMAGE_EDIT_2508_QWEN25VL, QWEN_IMAGE_EDIT_QWEN25VL, LlmTowerSpec
from core.archs.protocols import ExtraInputs
from core.archs.wan_vae.keys import diffusers_to_original
from core.archs.wan_vae.network import WanVAEConfig
from core.detect.catalog import diffusion_spec
from core.detect.spec import WAN21_LATENT
from core.generate.png import to_uint8_rgb
from core.loading.loader import load_vae
from core.models.llm import LlmConfig, LlmTextModel
from core.models.llm.vision import VisionConfig
from core.sampling import SamplingRequest, empty_latent, ksampler_sigmas, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower, qwen_tokenizer
from tests.core.archs.test_wan_vae_parity import _random_reference
from tests.core.generate.reference_qwen_image import ours_from, pack, qwen_image_reference
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE = 42, 3, 64
PROMPT = "put a red scarf on the fox"


@pytest.fixture(scope="module")
def text_model() -> LlmTextModel:
    vision = VisionConfig(depth=1, full_attention=(0,))
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen2.5-vl-7b"), num_layers=1, intermediate_size=1024, vision=vision
    )
    model = LlmTextModel(cfg, device="meta")
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.normal_(0.0 if name.endswith("bias") else 1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, p[0].numel() ** -0.5, generator=gen)
    return model.eval()


@pytest.fixture(scope="module")
def mmdit() -> object:
    return qwen_image_reference(seed=31)


def _original_spec() -> LlmTowerSpec:
    """The original Edit's tower spec with the vision tower's area at the test picture's size."""
    spec = QWEN_IMAGE_EDIT_2508_QWEN25VL
    assert spec.pictures is not None
    return dataclasses.replace(spec, pictures=dataclasses.replace(spec.pictures, area=SIZE * SIZE))


def _picture() -> np.ndarray:
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    rgb = np.stack([x * 4, y * 4, (x + y) * 2], axis=-1) % 256
    return rgb.astype(np.uint8)


@pytest.mark.parametrize("family", ["qwen-image-edit", "qwen-image-edit-2508"])
def test_qwen_image_edit_picture_matches_the_edit_pipelines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text_model: LlmTextModel, mmdit: object, family: str
) -> None:
    spec = diffusion_spec(family)
    original = family == "qwen-image-edit-2508"
    want_text = "qwen_image_edit_2508" if original else "qwen_image_edit"
    assert spec.text == want_text and spec.sampling.shift == 3.0 and spec.codec == "wan-vae"
    convention = TEXTS[spec.text]
    (name,) = (t.name for t in convention.towers)
    rgb = _picture()
    pixels = torch.from_numpy(rgb).permute(2, 0, 1).float() / 255  # [3, H, W] in 0..1
    tower_spec = _original_spec() if original else QWEN_IMAGE_EDIT_QWEN25VL
    assert (tower_spec.pictures.prefix == "<|vision_start|><|image_pad|><|vision_end|>") is original  # type: ignore[union-attr]
    tower = LlmTower(text_model, qwen_tokenizer(), tower_spec)
    text = convention.combine({name: tower.encode(PROMPT, [pixels])})
    hf_vae = _random_reference(diffusers.AutoencoderKLQwenImage)
    vae_file = write_tensors(
        tmp_path / "qwen_image_vae.safetensors",
        diffusers_to_original(hf_vae.state_dict(), WanVAEConfig(num_res_blocks=1)),
    )
    vae = load_vae(vae_file).module
    codec = codec_for("qwen-image-edit")
    with torch.no_grad():
        reference = WAN21_LATENT.process_in(codec.encode(vae, pixels[None] * 2 - 1))
    base = convention.network_inputs(text, ExtraInputs(SIZE, SIZE))
    cond = Conditioning(base.context, mask=base.mask, references=(reference,))
    hf = mmdit
    fmt = latent_format_for(family)
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    model_sampling = from_spec(spec.sampling, family)
    latent = sample(
        NetworkAdapter(ours_from(hf), convention=spec.network), model_sampling, fmt,
        empty_latent(1, SIZE, SIZE, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        ours = to_uint8_rgb(codec.decode(vae, latent)[0].float())

    sigmas = ksampler_sigmas(model_sampling, "simple", "euler", STEPS)
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    monkeypatch.setattr(plus, "VAE_IMAGE_SIZE", SIZE * SIZE)
    monkeypatch.setattr(edit, "calculate_dimensions", lambda area, ratio: (SIZE, SIZE, None))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe_cls = diffusers.QwenImageEditPipeline if original else diffusers.QwenImageEditPlusPipeline
    pipe = pipe_cls(
        scheduler=scheduler, vae=hf_vae, text_encoder=None, tokenizer=None, processor=None, transformer=hf
    )
    noise = torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))
    mask = torch.ones(cond.context.shape[:2], dtype=torch.long)
    picture = Image.fromarray(rgb)
    with torch.no_grad():
        images = pipe(
            image=picture if original else [picture], prompt_embeds=cond.context, prompt_embeds_mask=mask,
            sigmas=[float(s) for s in sigmas[:-1]], num_inference_steps=STEPS, height=SIZE, width=SIZE,
            true_cfg_scale=1.0, latents=pack(noise), output_type="np",
        ).images  # fmt: skip
    theirs = np.round(images[0] * 255).astype(np.int32)
    diff = np.abs(ours.astype(np.int32) - theirs)
    print(f"{family}: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}")
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5
    # the reference is attended: one step's velocity without it is another
    net, sigma = ours_from(hf), torch.tensor([float(sigmas[0])])
    with torch.no_grad():
        with_ref = net(noise, sigma, cond.context, references=[reference])
        assert not torch.allclose(net(noise, sigma, cond.context), with_ref, atol=1e-3)
