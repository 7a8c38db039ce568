"""The whole Z-Image and Lumina 2 picture against diffusers' ``ZImagePipeline`` and
``Lumina2Pipeline`` (test-only references), set up as ComfyUI computes.

Real-width networks with random weights on both sides: the text encoder (Qwen3-4B's 2560 / Gemma-2's
2304 wide, two layers; Qwen's real 151,936-token vocabulary, a Gemma-like SentencePiece trained
here) against transformers' ``Qwen3Model`` / ``Gemma2Model``; the Next-DiT (3840 / 2304 wide, one
joint block) against diffusers' transformer; a small 16-channel Flux-format VAE. Ours runs the way a
Loadout generation composes its parts: the family's tower (``core.text.llm``), its record's flow
sampling (shift 3 / 6, timestep = sigma), ComfyUI's KSampler (``euler``, ``simple``, CFG 1: no
negative pass), the Flux latent format and the VAE. diffusers is given what ComfyUI computes:

- the prompt's hidden states as the tower makes them (the template or system prompt, layer -2, no
  padding: diffusers pads to 512 / 256 tokens and drops or masks the pads: the same computation);
- ComfyUI's sigmas (the scheduler's own shift set to 1, so it applies none) and CPU noise;
- CFG 1, no negative pass: Lumina2Pipeline's guidance 1; ZImagePipeline's guidance 0 (it computes
  ``cond + g * (cond - uncond)``: ComfyUI's CFG is its g + 1).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.catalog import TEXTS
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec
from core.generate.png import to_uint8_rgb
from core.models.llm import LlmConfig
from core.models.vae import FLUX_LATENT
from core.sampling import SamplingRequest, empty_latent, ksampler_sigmas, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LUMINA2_GEMMA2, Z_IMAGE_QWEN3, LlmTower, SpmTokenizer, qwen_tokenizer
from tests.core.generate.reference import vae_pair
from tests.core.generate.reference_nextdit import lumina2_reference, ours_from, z_image_reference
from tests.core.models.llm import reference as llm_reference
from tests.core.text.llm.spm_model import gemma_like_spm

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE = 42, 3, 64
PROMPT = "a red fox in fresh snow, morning light"
#: 32 tokens in Z-Image's template: a whole multiple of 32, so the caption gets no pad tokens (ComfyUI
#: puts them at their running index, diffusers at position 0: the one difference, docs/families.md)
Z_PROMPT = (
    "a red fox standing in fresh deep snow at dawn, soft golden morning light on its fur, "
    "a quiet pine forest behind"
)


def _encoder(family: str, vocab: int, **hf_extra: Any) -> tuple[Any, Any, LlmConfig]:
    cfg = dataclasses.replace(LlmConfig.preset(family), vocab_size=vocab, num_layers=2)
    with torch.no_grad():
        hf = llm_reference.hf_model(
            family,
            llm_reference.hf_config(family, cfg, **hf_extra),
            **({"attn": "eager"} if family.startswith("gemma") else {}),
        )
    return hf, llm_reference.ours_from(hf, cfg), cfg


def _ours(family: str, tower: LlmTower, dit: Any, vae: Any, prompt: str) -> np.ndarray:
    """A generation's parts in its order: encode, sample (KSampler), decode."""
    spec = diffusion_spec(family)
    assert spec.text is not None
    convention = TEXTS[spec.text]
    (name,) = (t.name for t in convention.towers)
    text = convention.combine({name: tower.encode(prompt)})
    cond = convention.network_inputs(text, ExtraInputs(SIZE, SIZE))
    fmt = latent_format_for(family)
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    latent = sample(
        NetworkAdapter(dit, convention=spec.network), from_spec(spec.sampling, family), fmt,
        empty_latent(1, SIZE, SIZE, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        pixels = vae.decode(latent, scaled=False)  # the sampler hands back the VAE's own space
    return to_uint8_rgb(pixels[0].float())


def _sigmas(family: str) -> list[float]:
    spec = diffusion_spec(family)
    sigmas = ksampler_sigmas(from_spec(spec.sampling, family), "simple", "euler", STEPS)
    return [float(s) for s in sigmas[:-1]]


def _noise() -> torch.Tensor:
    """ComfyUI's initial noise: seeded CPU float32 over the empty latent's shape."""
    return torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))


def _theirs(
    pipeline: Any, family: str, parts: dict[str, Any], call: dict[str, Any], guidance: float
) -> np.ndarray:
    """The diffusers pipeline on ComfyUI's sigmas (its scheduler shifting nothing) and noise."""
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = pipeline(**parts, text_encoder=None, tokenizer=None, scheduler=scheduler)
    with torch.no_grad():
        out = pipe(
            sigmas=_sigmas(family), num_inference_steps=STEPS, height=SIZE, width=SIZE,
            guidance_scale=guidance, latents=_noise(), output_type="np", **call,
        ).images  # fmt: skip
    return np.round(out[0] * 255).astype(np.int32)


def _compare(ours: np.ndarray, theirs: np.ndarray, name: str) -> None:
    diff = np.abs(ours.astype(np.int32) - theirs)
    print(
        f"{name}: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}; spread {ours.std():.1f}"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5  # a picture, not a flat field


def test_z_image_picture_matches_zimage_pipeline() -> None:
    hf_text, ours_text, _ = _encoder("qwen3-4b", 151936)
    hf_dit = z_image_reference(seed=31)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=32)
    tower = LlmTower(ours_text, qwen_tokenizer(), Z_IMAGE_QWEN3)
    ours = _ours("z-image", tower, ours_from(hf_dit), vae, Z_PROMPT)
    ids = torch.tensor([qwen_tokenizer().encode(Z_IMAGE_QWEN3.text(Z_PROMPT))])
    assert ids.shape[1] == 32
    with torch.no_grad():  # transformers' model on the template's ids, penultimate layer, no padding
        embeds = hf_text(input_ids=ids, output_hidden_states=True).hidden_states[-2][0]
    parts = {"vae": hf_vae, "transformer": hf_dit}
    # ZImagePipeline's guidance g is ComfyUI's CFG 1 + g (cond + g (cond - uncond)): CFG 1 is g = 0
    theirs = _theirs(diffusers.ZImagePipeline, "z-image", parts, {"prompt_embeds": [embeds]}, 0.0)
    _compare(ours, theirs, "z-image")


def test_lumina2_picture_matches_lumina2_pipeline() -> None:
    tok = SpmTokenizer(gemma_like_spm())
    hf_text, ours_text, _ = _encoder("gemma2-2b", 700, attn_logit_softcapping=None)
    hf_dit = lumina2_reference(seed=33)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=34)
    tower = LlmTower(ours_text, tok, LUMINA2_GEMMA2)
    ours = _ours("lumina2", tower, ours_from(hf_dit), vae, PROMPT)
    ids = torch.tensor([[2, *tok.encode(LUMINA2_GEMMA2.text(PROMPT))]])  # BOS, system prompt, prompt
    mask = torch.ones_like(ids)
    with torch.no_grad():
        embeds = hf_text(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-2]
    parts = {"vae": hf_vae, "transformer": hf_dit}
    call = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
    theirs = _theirs(diffusers.Lumina2Pipeline, "lumina2", parts, call, 1.0)
    _compare(ours, theirs, "lumina2")
