"""The whole FLUX.2 klein picture against diffusers' ``Flux2KleinPipeline`` (test-only reference),
set up as ComfyUI computes.

Random weights on both sides: the text encoder a Qwen3 of klein's depth (27 layers: the stacked taps
9 / 18 / 27 exist) but narrow (64 wide), with Qwen's real 151,936-token vocabulary, against
transformers' ``Qwen3Model``; the FLUX.2 transformer with 128-wide heads (4 of them), one double and
one single block, against diffusers'; a narrow FLUX.2 VAE (32 latent channels, batch-norm
statistics) against ``AutoencoderKLFlux2``. Ours runs the way a Loadout generation composes its
parts: the record's prompt encoding (``core.text.llm``: klein's template, 512 tokens, layers
9/18/27 side by side), its flow sampling (ComfyUI's ``ModelSamplingFlux`` with shift 2.02,
timestep = sigma), ComfyUI's KSampler (``euler``, ``simple``, CFG 1: no negative pass), the
128-channel latent and the VAE's codec. diffusers is given what ComfyUI computes:

- the prompt's hidden states from transformers' model on the same 512 ids and mask (what
  ``Flux2KleinPipeline._get_qwen3_prompt_embeds`` computes with its own tokenizer);
- ComfyUI's sigmas (the scheduler's own shift switched off: diffusers would compute its empirical
  mu from the picture's size, as ComfyUI's Flux2Scheduler node does; docs/families.md) and CPU noise;
- CFG 1 (``is_distilled``: no negative pass).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.catalog import TEXTS, codec_for
from core.archs.llm.towers import KLEIN_QWEN3
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.models.llm import LlmConfig
from core.sampling import SamplingRequest, empty_latent, ksampler_sigmas, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower, qwen_tokenizer
from core.text.llm.encode import row_mask
from tests.core.generate.reference_flux2 import flux2_reference, flux2_vae_reference, ours_from, vae_from
from tests.core.models.llm import reference as llm_reference

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE, FAMILY = 42, 3, 64, "flux2-klein-4b"
PROMPT = "a red fox in fresh snow, morning light"


def _encoder() -> tuple[Any, Any]:
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen3-4b"), vocab_size=151936, hidden_size=64, intermediate_size=128,
        num_layers=27, num_heads=2, num_kv_heads=1, head_dim=32,
    )  # fmt: skip
    with torch.no_grad():
        hf = llm_reference.hf_model("qwen3-4b", llm_reference.hf_config("qwen3-4b", cfg))
    return hf, llm_reference.ours_from(hf, cfg)


def _ours(tower: LlmTower, dit: Any, vae: Any) -> np.ndarray:
    spec = diffusion_spec(FAMILY)
    assert spec.text is not None and spec.network == "flux2"
    convention = TEXTS[spec.text]
    (name,) = (t.name for t in convention.towers)
    text = convention.combine({name: tower.encode(PROMPT)})
    assert text.context.shape == (1, 512, 3 * 64)
    cond = convention.network_inputs(text, ExtraInputs(SIZE, SIZE))
    fmt = latent_format_for(FAMILY)
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    latent = sample(
        NetworkAdapter(dit, convention=spec.network), from_spec(spec.sampling, FAMILY), fmt,
        empty_latent(1, SIZE, SIZE, fmt), cond, None, request,
    )  # fmt: skip
    assert latent.shape == (1, 128, SIZE // 16, SIZE // 16)
    with torch.no_grad():
        pixels = codec_for(FAMILY).decode(vae, latent)
    return to_uint8_rgb(pixels[0].float())


def _embeds(hf_text: Any) -> torch.Tensor:
    """transformers' Qwen3 on the template's ids padded to 512, layers 9/18/27 side by side."""
    ids = qwen_tokenizer().encode(KLEIN_QWEN3.text(PROMPT))
    ids = ids + [KLEIN_QWEN3.pad] * (512 - len(ids))
    mask = torch.tensor([row_mask(ids, KLEIN_QWEN3.pad)])
    with torch.no_grad():
        out = hf_text(input_ids=torch.tensor([ids]), attention_mask=mask, output_hidden_states=True)
    states = torch.stack([out.hidden_states[k] for k in (9, 18, 27)], dim=1)
    return states.permute(0, 2, 1, 3).reshape(1, 512, -1)


def _theirs(hf_dit: Any, hf_vae: Any, embeds: torch.Tensor) -> np.ndarray:
    spec = diffusion_spec(FAMILY)
    sigmas = ksampler_sigmas(from_spec(spec.sampling, FAMILY), "simple", "euler", STEPS)
    noise = torch.randn(1, 128, SIZE // 16, SIZE // 16, generator=torch.Generator("cpu").manual_seed(SEED))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.Flux2KleinPipeline(
        scheduler=scheduler, vae=hf_vae, text_encoder=None, tokenizer=None, transformer=hf_dit,
        is_distilled=True,
    )  # fmt: skip
    with torch.no_grad():
        out = pipe(
            prompt_embeds=embeds, sigmas=[float(s) for s in sigmas[:-1]], num_inference_steps=STEPS,
            height=SIZE, width=SIZE, guidance_scale=1.0, latents=noise, output_type="np",
        ).images  # fmt: skip
    return np.round(out[0] * 255).astype(np.int32)


def test_klein_picture_matches_flux2_klein_pipeline() -> None:
    hf_text, ours_text = _encoder()
    hf_dit = flux2_reference(heads=4, context=3 * 64, seed=51)
    hf_vae = flux2_vae_reference(base=32, seed=52)
    tower = LlmTower(ours_text, qwen_tokenizer(), KLEIN_QWEN3)
    ours = _ours(tower, ours_from(hf_dit), vae_from(hf_vae))
    theirs = _theirs(hf_dit, hf_vae, _embeds(hf_text))
    diff = np.abs(ours.astype(np.int32) - theirs)
    print(
        f"flux2 klein: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}; "
        f"spread {ours.std():.1f}"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5  # a picture, not a flat field
