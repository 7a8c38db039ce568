"""The whole Flux-dev path against diffusers' FluxPipeline (test-only reference).

Tiny real-architecture networks with random weights run in both: CLIP-L (pooled output, not
projected, as both libraries take it), a T5 v1.1 encoder with a real SentencePiece vocabulary
trained here, a FluxTransformer2DModel with guidance embedding (Flux-dev) and a 16-channel
AutoencoderKL with Flux's scale and shift; ours are loaded from their state dicts. diffusers is set
up the way ComfyUI computes (docs/generate.md):

- ComfyUI's Flux-dev sampling is ``ModelSamplingFlux`` with shift (mu) 1.15 for every picture
  size; diffusers' FluxPipeline shifts its sigmas by a mu that grows with the image's token count
  (``use_dynamic_shifting``). Here the scheduler has no dynamic shifting and ``shift=1`` and is
  handed ComfyUI's sigmas (karras or simple over the mu-1.15 table); its timesteps, sigma * 1000,
  reach the transformer as sigma, ComfyUI's Flux timestep;
- the first latent is ComfyUI's CPU noise (sigma_max is 1, so flow noise scaling leaves it as it
  is), packed into 2x2 patches as diffusers expects ready-made latents;
- T5 is padded to 256 tokens (``max_sequence_length=256``: ComfyUI's Flux T5 minimum), no mask;
- distilled guidance 3.5 (ComfyUI's default without a FluxGuidance node) and CFG 1 (diffusers'
  ``true_cfg_scale=1``): one forward per step, the negative prompt never encoded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.models.flux import Flux, FluxConfig, pack_latents
from core.models.vae import FLUX_LATENT
from core.sampling import for_family, ksampler_sigmas
from core.text.conditioning import FLUX_T5_MIN_LENGTH, TextEncoders
from tests.core.generate.reference import (
    clip_pair,
    clip_tokenizer,
    randomize,
    t5_pair,
    t5_tokenizers,
    tame_output,
    to_unit_image,
    vae_pair,
)

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]

L_WIDTH, T5_WIDTH = 32, 24


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Any]:
    tok_l = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(tmp_path_factory.mktemp("t5"))
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=31)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=32)
    config = FluxConfig(
        in_channels=64, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, hidden_size=32,
        num_heads=2, depth=1, depth_single_blocks=2, axes_dim=(4, 6, 6), guidance_embed=True,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_flux = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=64, out_channels=64, num_layers=1, num_single_layers=2,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=T5_WIDTH,
        pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(4, 6, 6),
    )  # fmt: skip
    randomize(hf_flux, 33)
    tame_output(hf_flux.proj_out)
    flux = Flux(config).eval()
    flux.load_state_dict(flux_diffusers_to_original(hf_flux.state_dict(), config), strict=True)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=34)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.FluxPipeline(
        scheduler=scheduler, vae=hf_vae, text_encoder=hf_l, tokenizer=tok_l, text_encoder_2=hf_t5,
        tokenizer_2=hf_t5_tok, transformer=hf_flux,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    nets = Networks("flux-dev", flux, TextEncoders(clip_l=clip_l, t5=t5), vae)
    return pipe, nets, our_t5_tok


def _diffusers_image(pipe: Any, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
    assert float(sigmas[0]) == 1.0 and float(sigmas[-1]) == 0.0
    noise = torch.randn(
        (settings.batch, 16, settings.height // 8, settings.width // 8),
        generator=torch.Generator("cpu").manual_seed(s.seed),
    )
    out = pipe(
        settings.prompt, num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(),
        guidance_scale=3.5 if s.guidance is None else s.guidance, true_cfg_scale=1.0,
        latents=pack_latents(noise), height=settings.height, width=settings.width,
        max_sequence_length=FLUX_T5_MIN_LENGTH, output_type="np",
    )  # fmt: skip
    return np.asarray(out.images)


@pytest.mark.parametrize(
    ("scheduler", "seed", "guidance"), [("karras", 0, None), ("karras", 2024, 5.0), ("simple", 9, None)]
)
def test_euler_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any], scheduler: str, seed: int, guidance: float | None
) -> None:
    pipe, nets, t5_tok = pair
    settings = ImageSettings(
        prompt="a tiny red fox, forest", negative="never encoded", width=64, height=80,
        sampling=Sampling(seed=seed, steps=5, sampler="euler", scheduler=scheduler, guidance=guidance),
    )  # fmt: skip
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    assert pipeline.cfg(settings) == 1.0  # Flux-dev's default: no classifier-free guidance
    pixels, _, _ = pipeline.run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings)
    err = float(np.abs(ours - theirs).max())
    print(f"flux-dev euler {scheduler} seed {seed} guidance {guidance}: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == theirs.shape == (1, 80, 64, 3)
    assert err < 2e-5
    assert float(ours.std()) > 0.05


def test_guidance_reaches_the_picture(pair: tuple[Any, Networks, Any]) -> None:
    """The distilled guidance is not inert in this tiny network: 3.5 and 5 give different pictures
    (so the parity above checks that the guidance value is carried through)."""
    _, nets, t5_tok = pair
    pictures = []
    for guidance in (3.5, 5.0):
        settings = ImageSettings(
            prompt="a tiny red fox", width=64, height=64,
            sampling=Sampling(seed=0, steps=2, sampler="euler", scheduler="simple", guidance=guidance),
        )  # fmt: skip
        pictures.append(Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())[0])
    assert float((pictures[0] - pictures[1]).abs().max()) > 1e-3


def test_cfg_pp_samplers_encode_and_use_the_negative_at_cfg_1(pair: tuple[Any, Networks, Any]) -> None:
    """CFG 1 runs no negative pass, except for the CFG++ samplers, which step along the negative's
    estimate (ComfyUI evaluates it for them even at CFG 1)."""
    _, nets, t5_tok = pair
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)

    def settings(sampler: str, negative: str) -> ImageSettings:
        return ImageSettings(
            prompt="a tiny red fox", negative=negative, width=64, height=64,
            # 4 steps: at sigma 1 a flow model's alpha is 0 and the last step is the denoised estimate
            sampling=Sampling(seed=0, steps=4, sampler=sampler, scheduler="simple"),
        )  # fmt: skip

    assert pipeline.encode_prompts(settings("euler", "blurry"), Hooks(), announce=False)[1] is None
    assert pipeline.encode_prompts(settings("euler_cfg_pp", "blurry"), Hooks(), announce=False)[1] is not None
    a = pipeline.run(settings("euler_cfg_pp", "blurry"), Hooks())[0]
    b = pipeline.run(settings("euler_cfg_pp", "a green frog"), Hooks())[0]
    assert float((a - b).abs().max()) > 1e-3
