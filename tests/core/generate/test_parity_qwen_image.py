"""The Qwen-Image picture against diffusers' ``QwenImagePipeline`` (test-only reference), set up as
ComfyUI computes.

Ours runs the way a Loadout generation composes its parts: Qwen-Image's tower (``core.text.llm``:
Qwen2.5-VL-7B's 3584-wide text model, one layer of random bf16 weights, Qwen's real vocabulary;
the tower itself is proven against transformers in tests/core/text/llm), its record's flow
sampling (shift 3.1, timestep = sigma), ComfyUI's KSampler (``euler``, ``simple``, CFG 1: no
negative pass), the Wan 2.1 latent format and the record's codec (``wan-vae``: the VAE written in
the original layout, as ``qwen_image_vae.safetensors`` is, and loaded by the loader); the MMDiT at
its released width (one block) against diffusers' transformer with the same weights, the VAE
(real width, one residual block per level) against ``AutoencoderKLQwenImage``. diffusers is given
what ComfyUI computes:

- the prompt's hidden states as the tower makes them (the template's system part dropped: diffusers
  drops the same 34 tokens);
- ComfyUI's sigmas (the scheduler's own shift set to 1 and its size-dependent shift off) and CPU
  noise, packed into 2x2 patches as the pipeline packs its latents;
- ``true_cfg_scale`` 1: no negative pass (above 1 diffusers rescales the guided prediction to the
  conditional one's norm, which ComfyUI does not: docs/families.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from core.archs.catalog import TEXTS, codec_for
from core.archs.llm.towers import QWEN_IMAGE_QWEN25VL
from core.archs.protocols import ExtraInputs
from core.archs.wan_vae.keys import diffusers_to_original
from core.archs.wan_vae.network import WanVAEConfig
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.loading.loader import load_vae
from core.models.llm import LlmConfig, LlmTextModel
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
PROMPT = "a red fox in fresh snow, morning light, a wooden sign that says 'Qwen'"


def _tower() -> LlmTower:
    """Qwen2.5-VL-7B's text model at its width and vocabulary, one layer (a narrower MLP), bf16."""
    cfg = dataclasses.replace(LlmConfig.preset("qwen2.5-vl-7b"), num_layers=1, intermediate_size=1024)
    model = LlmTextModel(cfg, device="meta", dtype=torch.bfloat16)
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.normal_(0.0 if name.endswith("bias") else 1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5, generator=gen)
    return LlmTower(model.eval(), qwen_tokenizer(), QWEN_IMAGE_QWEN25VL)


def _noise() -> torch.Tensor:
    """ComfyUI's initial noise: seeded CPU float32 over the empty latent's shape (its one frame
    changes no value)."""
    return torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))


def test_qwen_image_picture_matches_qwen_image_pipeline(tmp_path: Path) -> None:
    spec = diffusion_spec("qwen-image")
    assert spec.text is not None and spec.sampling.shift == 3.1 and spec.codec == "wan-vae"
    convention = TEXTS[spec.text]
    (name,) = (t.name for t in convention.towers)
    text = convention.combine({name: _tower().encode(PROMPT)})
    cond = convention.network_inputs(text, ExtraInputs(SIZE, SIZE))
    assert cond.pooled is None
    hf = qwen_image_reference(seed=31)
    hf_vae = _random_reference(diffusers.AutoencoderKLQwenImage)
    vae_file = write_tensors(
        tmp_path / "qwen_image_vae.safetensors",
        diffusers_to_original(hf_vae.state_dict(), WanVAEConfig(num_res_blocks=1)),
    )
    fmt = latent_format_for("qwen-image")
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    latent = sample(
        NetworkAdapter(ours_from(hf), convention=spec.network), from_spec(spec.sampling, "qwen-image"), fmt,
        empty_latent(1, SIZE, SIZE, fmt), cond, None, request,
    )  # fmt: skip
    vae = load_vae(vae_file).module
    with torch.no_grad():  # the sampler hands back the VAE's own space
        ours = to_uint8_rgb(codec_for("qwen-image").decode(vae, latent)[0].float())

    sigmas = ksampler_sigmas(from_spec(spec.sampling, "qwen-image"), "simple", "euler", STEPS)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.QwenImagePipeline(
        scheduler=scheduler, vae=hf_vae, text_encoder=None, tokenizer=None, transformer=hf
    )
    mask = torch.ones(cond.context.shape[:2], dtype=torch.long)  # every token real: no padding
    with torch.no_grad():
        images = pipe(
            prompt_embeds=cond.context, prompt_embeds_mask=mask,
            sigmas=[float(s) for s in sigmas[:-1]], num_inference_steps=STEPS, height=SIZE, width=SIZE,
            true_cfg_scale=1.0, latents=pack(_noise()), output_type="np",
        ).images  # fmt: skip
    theirs = np.round(images[0] * 255).astype(np.int32)
    diff = np.abs(ours.astype(np.int32) - theirs)
    print(
        f"qwen-image: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}; "
        f"spread {ours.std():.1f}"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5  # a picture, not a flat field
