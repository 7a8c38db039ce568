"""The whole SD3 path against diffusers' StableDiffusion3Pipeline (test-only reference).

Tiny real-architecture networks with random weights run in both: CLIP-L and OpenCLIP-G (both with
text projections, as SD3's text encoder files have them), a T5 v1.1 encoder, an SD3Transformer2DModel
and a 16-channel AutoencoderKL with SD3's scale and shift; ours are loaded from their state dicts.
The T5 vocabulary is a real SentencePiece model trained here, read by our tokenizer and by
transformers' T5Tokenizer. diffusers is set up the way ComfyUI computes (docs/generate.md):

- FlowMatchEulerDiscreteScheduler with ``shift=1`` and no dynamic shifting, handed ComfyUI's sigmas
  (already shift-3 sigmas: with diffusers' own ``shift=3`` they would be shifted twice); its
  timesteps are then sigma * 1000, ComfyUI's SD3 timesteps;
- the first latent is ComfyUI's CPU noise (flow noise scaling sigma * noise + (1 - sigma) * 0 with
  sigma_max = 1 leaves it as it is; diffusers does not scale it either);
- T5 is padded to 77 tokens (``max_sequence_length=77``: ComfyUI's SD3 T5 minimum) with no attention
  mask; CLIP contexts are zero-padded to T5's width, 4096 (ComfyUI pads to 4096 whatever T5 is, so the
  tiny T5 here is 4096 wide);
- CLIP-L's pooled vector: ComfyUI's SD3 takes it *unprojected* (``return_projected_pooled=False``),
  diffusers takes CLIP-L's ``text_embeds`` (projected). The diffusers copy of CLIP-L gets an identity
  projection; ours keeps the file's real projection, which it must ignore.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.dit_diffusers import sd3_diffusers_to_original
from core.models.mmdit import MMDiT, MMDiTConfig
from core.sampling import for_family, ksampler_sigmas
from core.text.conditioning import SD3_CONTEXT_WIDTH
from tests.core.generate.reference import randomize, tame_output, to_unit_image
from tests.core.generate.sd3_parts import POOLED, sd3_parts

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Any]:
    parts = sd3_parts(tmp_path_factory)
    config = MMDiTConfig(
        depth=2, num_heads=2, head_dim=16, pos_embed_max_size=8, context_dim=SD3_CONTEXT_WIDTH,
        adm_in_channels=POOLED,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_dit = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=SD3_CONTEXT_WIDTH, caption_projection_dim=32,
        pooled_projection_dim=POOLED, pos_embed_max_size=8,
    )  # fmt: skip
    randomize(hf_dit, 24)
    tame_output(hf_dit.proj_out)
    dit = MMDiT(config).eval()
    dit.load_state_dict(sd3_diffusers_to_original(hf_dit.state_dict(), config), strict=True)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.StableDiffusion3Pipeline(transformer=hf_dit, scheduler=scheduler, **parts.diffusers)
    pipe.set_progress_bar_config(disable=True)
    nets = Networks("sd3", dit, parts.encoders, parts.vae)
    return pipe, nets, parts.t5_tokenizer


def _diffusers_image(pipe: Any, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    sigmas = ksampler_sigmas(for_family("sd3"), s.scheduler, s.sampler, s.steps)
    assert float(sigmas[-1]) == 0.0  # diffusers appends the final 0 itself
    noise = torch.randn(
        (settings.batch, 16, settings.height // 8, settings.width // 8),
        generator=torch.Generator("cpu").manual_seed(s.seed),
    )
    out = pipe(
        settings.prompt, negative_prompt=settings.negative, num_inference_steps=s.steps,
        sigmas=sigmas[:-1].tolist(), guidance_scale=s.cfg, latents=noise, height=settings.height,
        width=settings.width, max_sequence_length=77, output_type="np",
    )  # fmt: skip
    return np.asarray(out.images)


@pytest.mark.parametrize(("scheduler", "seed"), [("karras", 0), ("karras", 4242), ("simple", 7)])
def test_euler_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any], scheduler: str, seed: int
) -> None:
    pipe, nets, t5_tok = pair
    settings = ImageSettings(
        prompt="a tiny red fox, forest", negative="blurry, low quality", width=64, height=80,
        sampling=Sampling(seed=seed, steps=5, cfg=4.5, sampler="euler", scheduler=scheduler),
    )  # fmt: skip
    pixels, _, _ = Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings)
    err = float(np.abs(ours - theirs).max())
    print(f"sd3 euler {scheduler} seed {seed}: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == theirs.shape == (1, 80, 64, 3)
    # the conditioning agrees to ~2e-6 relative (test below: the 4096-wide T5 sums round differently
    # in the two libraries); five steps at CFG 4.5 amplify that to 6e-6..7e-5 on [0, 1] pixels
    # (0.02 of an 8-bit level at most): the bound leaves room for other CPUs' rounding
    assert err < 2e-4
    assert float(ours.std()) > 0.05


def test_prompt_encoding_equals_diffusers(pair: tuple[Any, Networks, Any]) -> None:
    """ComfyUI's SD3 conditioning (CLIP-L ++ CLIP-G penultimate, zero-padded to 4096, then T5 along
    tokens; pooled CLIP-L unprojected ++ CLIP-G projected) equals diffusers' ``encode_prompt`` with
    CLIP-L's projection set to the identity: the whole layout, both prompts."""
    pipe, nets, t5_tok = pair
    settings = ImageSettings(prompt="a tiny red fox, forest", negative="blurry", width=64, height=64)
    pos, neg, _ = Pipeline(nets, Compute(), t5_tokenizer=t5_tok).encode_prompts(settings, Hooks())
    assert neg is not None and pos.pooled is not None and neg.pooled is not None
    with torch.no_grad():
        ctx, neg_ctx, pooled, neg_pooled = pipe.encode_prompt(
            settings.prompt,
            None,
            None,
            negative_prompt=settings.negative,
            max_sequence_length=77,
            device="cpu",
        )
    assert pos.context.shape == ctx.shape == (1, 77 + 77, SD3_CONTEXT_WIDTH)
    for a, b in ((pos.context, ctx), (neg.context, neg_ctx), (pos.pooled, pooled), (neg.pooled, neg_pooled)):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5
    assert pos.pooled.shape == (1, POOLED)
