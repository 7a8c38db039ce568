"""FLUX.1 Fill inpainting against diffusers' FluxFillPipeline (test-only reference), on a Fill file
at the real width (3072, 24 heads of 128, the 384-channel input), one double and one single block,
random weights, written in Black Forest Labs' layout and read back through detection and the loader.

diffusers is set up the way ComfyUI computes (docs/generate.md, "FLUX.1 Fill"), as
test_parity_flux.py does for Flux-dev (ComfyUI's sigmas, CPU noise packed, T5 at 256 tokens, CFG 1),
with ComfyUI's Fill template's FluxGuidance 30, and:

- the masked picture's latent is the VAE's posterior mean (ComfyUI's VAEEncode); diffusers samples the
  posterior with its generator, so its VAE's posterior is made deterministic (:func:`encode_to_mean`);
- InpaintModelConditioning's noise mask (on in ComfyUI's template) keeps the unmasked latent: each
  diffusers step is followed by the same keep (the picture's latent noised to the next sigma outside
  the mask), which for Euler is what ComfyUI's KSamplerX0Inpaint computes.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw
from safetensors.torch import save_file

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.flux import FluxConfig, pack_latents
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
pytest.importorskip("sentencepiece")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]

L_WIDTH, T5_WIDTH, SIZE, GUIDANCE = 32, 24, 64, 30.0
PROMPT = "a red door in a stone wall"


def picture(path: Path) -> np.ndarray:
    """A drawn picture: a sky gradient, a hill, a sun (real edges and flat areas)."""
    img = Image.new("RGB", (SIZE, SIZE))
    draw = ImageDraw.Draw(img)
    for y in range(SIZE):
        draw.line([(0, y), (SIZE, y)], fill=(40 + 2 * y, 90 + y, 200 - y))
    draw.ellipse([38, 6, 56, 24], fill=(250, 210, 60))
    draw.polygon([(0, 64), (0, 40), (30, 30), (64, 44), (64, 64)], fill=(50, 120, 40))
    img.save(path)
    return np.asarray(img)


def mask(path: Path) -> np.ndarray:
    """White = repaint: a 32x16 block on 16-pixel edges (its latent-size noise mask is exact)."""
    m = np.zeros((SIZE, SIZE), np.uint8)
    m[16:48, 32:48] = 255
    Image.fromarray(m).save(path)
    return m


def fill_pair(seed: int, path: Path) -> Any:
    """diffusers' FluxTransformer2DModel as FLUX.1 Fill at the real width (1 + 1 blocks), its weights
    rounded to bf16 values, and the same weights written to ``path`` in BFL's layout (bf16: exact).
    One copy of the network at a time (the fp32 one is dropped while the file is written)."""
    with torch.device("meta"):  # no init: every weight is drawn below
        hf = diffusers.FluxTransformer2DModel(
            patch_size=1, in_channels=384, out_channels=64, num_layers=1, num_single_layers=1,
            attention_head_dim=128, num_attention_heads=24, joint_attention_dim=T5_WIDTH,
            pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(16, 56, 56),
        )  # fmt: skip
    assert not list(hf.buffers())
    randomize(hf.to_empty(device="cpu"), seed)
    tame_output(hf.proj_out)
    half = {k: v.to(torch.bfloat16) for k, v in hf.state_dict().items()}
    hf.to_empty(device="meta")
    config = FluxConfig(
        in_channels=384, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, depth=1,
        depth_single_blocks=1,
    )  # fmt: skip
    ours = {k: v.contiguous() for k, v in flux_diffusers_to_original(half, config).items()}
    save_file(ours, str(path))
    del ours
    hf.to_empty(device="cpu")
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(half.pop(name).float())
    return hf


def encode_to_mean(vae: Any) -> Any:
    """diffusers' VAE with its encoder's posterior made deterministic (its sample is its mean), as
    ComfyUI's VAEEncode takes it; diffusers' FluxFillPipeline samples it and cannot be handed the
    masked picture's latent instead (0.42.1 refuses ``masked_image_latents`` beside ``image`` and
    needs ``image``)."""
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from diffusers.models.modeling_outputs import AutoencoderKLOutput

    encode = vae.encode

    def mean_encode(x: torch.Tensor, return_dict: bool = True) -> Any:
        params = encode(x).latent_dist.parameters
        return AutoencoderKLOutput(latent_dist=DiagonalGaussianDistribution(params, deterministic=True))

    vae.encode = mean_encode
    return vae


def _comfy_noise_mask(m: np.ndarray, h: int, w: int) -> torch.Tensor:
    """SetLatentNoiseMask's mask at the latent's size, as ComfyUI's sampler resizes it (bilinear)."""
    full = torch.from_numpy(m.astype(np.float32) / 255.0)[None, None]
    return F.interpolate(full, size=(h, w), mode="bilinear")


def diffusers_fill(pipe: Any, rgb: np.ndarray, m: np.ndarray, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    sigmas = ksampler_sigmas(for_family("flux-fill"), s.scheduler, s.sampler, s.steps)
    h, w = SIZE // 8, SIZE // 8
    noise = torch.randn((1, 16, h, w), generator=torch.Generator("cpu").manual_seed(s.seed))
    vae = pipe.vae
    with torch.no_grad():
        latent = vae.encode(pipe.image_processor.preprocess(Image.fromarray(rgb))).latent_dist.mode()
    latent = (latent - vae.config.shift_factor) * vae.config.scaling_factor
    keep = pack_latents((1 - _comfy_noise_mask(m, h, w)).expand(1, 16, h, w))
    noise_packed, latent_packed = pack_latents(noise), pack_latents(latent)

    def keep_unmasked(pipeline: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        nxt = float(pipeline.scheduler.sigmas[i + 1])
        proper = (1 - nxt) * latent_packed + nxt * noise_packed
        return {"latents": kwargs["latents"] * (1 - keep) + proper * keep}

    out = pipe(
        settings.prompt, image=Image.fromarray(rgb), mask_image=Image.fromarray(m),
        num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(), guidance_scale=GUIDANCE,
        latents=noise_packed, height=SIZE, width=SIZE, max_sequence_length=FLUX_T5_MIN_LENGTH,
        output_type="np", callback_on_step_end=keep_unmasked,
    )  # fmt: skip
    return np.asarray(out.images)


def test_flux_fill_inpainting_equals_diffusers_fill_pipeline_set_up_as_comfyui(tmp_path: Path) -> None:
    tok_l = clip_tokenizer(tmp_path / "clip_l", pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(tmp_path / "t5")
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=31)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=32)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=34)
    model = tmp_path / "flux1-fill-dev.safetensors"
    hf_fill = fill_pair(33, model)
    assert inspect_for_loading(model)[1].family == "flux-fill"

    rgb, m = picture(tmp_path / "init.png"), mask(tmp_path / "mask.png")
    settings = ImageSettings(
        PROMPT, width=SIZE, height=SIZE, init_image=tmp_path / "init.png", mask_image=tmp_path / "mask.png",
        sampling=Sampling(seed=5, steps=2, sampler="euler", scheduler="simple", guidance=GUIDANCE),
    )  # fmt: skip
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.FluxFillPipeline(
        scheduler=scheduler, vae=encode_to_mean(hf_vae), text_encoder=hf_l, tokenizer=tok_l,
        text_encoder_2=hf_t5, tokenizer_2=hf_t5_tok, transformer=hf_fill,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    theirs = diffusers_fill(pipe, rgb, m, settings)
    del pipe, hf_fill
    gc.collect()

    fill = load_diffusion_model(model).module
    nets = Networks("flux-fill", fill, TextEncoders(clip_l=clip_l, t5=t5), vae)
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=our_t5_tok)
    assert pipeline.cfg(settings) == 1.0
    pixels, _, _ = pipeline.run(settings, Hooks(), init=rgb)
    ours = to_unit_image(pixels)
    err = float(np.abs(ours - theirs).max())
    print(f"flux-fill: max |ours - diffusers| = {err:.1e} ({err * 255:.2f}/255)")
    assert ours.shape == theirs.shape == (1, SIZE, SIZE, 3)
    assert err < 3 / 255
    # the repaint is not a copy of the picture: under the mask it moved away from the picture
    inside = np.abs(ours[0, 16:48, 32:48] - rgb[16:48, 32:48] / 255.0).mean()
    assert inside > 0.02
