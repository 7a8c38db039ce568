"""FLUX.2 dev's prompt encoding and whole picture, as ComfyUI computes them.

The encoder: Mistral-Small-3's network, narrow (64 wide) but 30 layers deep (the taps 10 / 20 / 30
exist), random weights, against transformers' ``MistralModel`` on the ids ComfyUI reads: ``<s>``,
then the template (Mistral's system prompt and ``[INST]`` markers as Tekken special tokens), no
padding; the three hidden states side by side, after zeros up to 512 tokens (ComfyUI's ``Flux2``
model pads a shorter context at the front). The tokenizer is a Tekken vocabulary trained for
the tests (ComfyUI's reading of it: Llama-3's split).

The picture: the FLUX.2 transformer in its dev form (a guidance embedder), one double and one
single block, and a narrow FLUX.2 VAE, against diffusers' ``Flux2Pipeline`` with its own scheduler
(the empirical shift from the size, what ComfyUI's Flux2Scheduler gives), the embedded guidance
4.0 and CPU noise, given the prompt's hidden states computed by transformers on ComfyUI's ids
(diffusers' own prompt path pads to 512 tokens through its chat template; ComfyUI does not pad).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.catalog import TEXTS, codec_for
from core.archs.llm.towers import FLUX2_DEV_LAYERS, FLUX2_DEV_MISTRAL
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec, generation_defaults
from core.generate.png import to_uint8_rgb
from core.models.llm import LlmConfig
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower
from core.text.llm.bpe import from_tekken
from tests.core.generate.reference_flux2 import flux2_reference, flux2_vae_reference, ours_from, vae_from
from tests.core.models.llm import reference as llm_reference
from tests.core.text.llm.bpe_vocab import tekken_json

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE, FAMILY = 7, 3, 64, "flux2-dev"
PROMPT = "a lighthouse on a cliff at dusk, seen from the sea"
MARKERS = {"[SYSTEM_PROMPT]": 17, "[/SYSTEM_PROMPT]": 18, "[INST]": 3, "[/INST]": 4}


@pytest.fixture(scope="module")
def encoder() -> tuple[Any, LlmTower, list[int]]:
    tok = from_tekken(tekken_json())
    ids = [1, *tok.encode(FLUX2_DEV_MISTRAL.text(PROMPT))]
    cfg = dataclasses.replace(
        LlmConfig.preset("mistral3-24b"), vocab_size=max(ids) + 64, hidden_size=64, intermediate_size=128,
        num_layers=30, num_heads=2, num_kv_heads=1, head_dim=32,
    )  # fmt: skip
    with torch.no_grad():
        hf = llm_reference.hf_model("mistral3-24b", llm_reference.hf_config("mistral3-24b", cfg))
    return hf, LlmTower(llm_reference.ours_from(hf, cfg), tok, FLUX2_DEV_MISTRAL), ids


def _hf_embeds(hf: Any, ids: list[int]) -> torch.Tensor:
    """transformers' three states side by side, after zeros up to 512 tokens (ComfyUI's Flux2 model)."""
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([ids]), output_hidden_states=True)
    states = torch.stack([out.hidden_states[k] for k in FLUX2_DEV_LAYERS], dim=1)
    stacked = states.permute(0, 2, 1, 3).reshape(1, len(ids), -1)
    return torch.cat([torch.zeros(1, 512 - len(ids), stacked.shape[2]), stacked], dim=1)


def test_dev_prompt_encoding_equals_transformers(encoder: tuple[Any, LlmTower, list[int]]) -> None:
    hf, tower, ids = encoder
    assert [t for t in ids if t in MARKERS.values()] == [17, 18, 3, 4]  # each marker one special token
    spec = diffusion_spec(FAMILY)
    assert spec.text == "flux2_dev"
    convention = TEXTS[spec.text]
    cond = convention.network_inputs(
        convention.combine({"mistral3_24b": tower.encode(PROMPT)}), ExtraInputs(64, 64)
    )
    want = _hf_embeds(hf, ids)
    assert cond.context.shape == want.shape == (1, 512, 3 * 64)  # zeros in front, as ComfyUI's Flux2
    assert not cond.context[0, : 512 - len(ids)].any()
    assert cond.mask is None and cond.guidance is not None and float(cond.guidance[0]) == 4.0
    err = float((cond.context - want).abs().max() / want.abs().max())
    assert err < 1e-4, err


def test_dev_picture_equals_flux2_pipeline(encoder: tuple[Any, LlmTower, list[int]]) -> None:
    hf, tower, ids = encoder
    hf_dit = flux2_reference(heads=4, context=3 * 64, guidance=True, seed=61)
    hf_vae = flux2_vae_reference(base=32, seed=62)
    spec = diffusion_spec(FAMILY)
    defaults = generation_defaults(FAMILY)
    assert (defaults.scheduler, defaults.cfg) == ("flux2", 1.0)
    convention = TEXTS[spec.text]  # type: ignore[index]
    cond = convention.network_inputs(
        convention.combine({"mistral3_24b": tower.encode(PROMPT)}), ExtraInputs(SIZE, SIZE)
    )
    fmt = latent_format_for(FAMILY)
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="flux2")
    latent = sample(
        NetworkAdapter(ours_from(hf_dit), convention=spec.network), from_spec(spec.sampling, FAMILY), fmt,
        empty_latent(1, SIZE, SIZE, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        ours = to_uint8_rgb(codec_for(FAMILY).decode(vae_from(hf_vae), latent)[0].float()).astype(np.int32)

    noise = torch.randn(1, 128, SIZE // 16, SIZE // 16, generator=torch.Generator("cpu").manual_seed(SEED))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        use_dynamic_shifting=True, time_shift_type="exponential"
    )
    pipe = diffusers.Flux2Pipeline(scheduler=scheduler, vae=hf_vae, text_encoder=None, tokenizer=None,
                                   transformer=hf_dit)  # fmt: skip
    with torch.no_grad():
        out = pipe(
            prompt_embeds=_hf_embeds(hf, ids), num_inference_steps=STEPS, height=SIZE, width=SIZE,
            guidance_scale=4.0, latents=noise, output_type="np",
        ).images  # fmt: skip
    theirs = np.round(out[0] * 255).astype(np.int32)
    diff = np.abs(ours - theirs)
    print(
        f"flux2 dev: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}; "
        f"spread {ours.std():.1f}"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5
