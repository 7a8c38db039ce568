"""The whole SD1 path against diffusers' StableDiffusionPipeline (test-only reference).

The same tiny real-architecture networks (random weights) run in both: diffusers' CLIPTextModel,
UNet2DConditionModel and AutoencoderKL, and ours loaded from their state dicts. diffusers is set
up the way ComfyUI computes, and each setting says which difference it removes (docs/generate.md):

- its scheduler walks ComfyUI's sigmas (karras, from core.sampling), and the UNet sees ComfyUI's
  timesteps: the *nearest* table index of each sigma (diffusers interpolates a fractional one);
- the initial latent is ComfyUI's noise, ``randn`` on a CPU generator seeded with the seed,
  handed to diffusers unscaled (it multiplies by ``init_noise_sigma`` = sqrt(1 + sigma_max^2),
  which is ComfyUI's "max denoise" scaling);
- text goes through transformers' CLIPTokenizer built from open_clip's vocabulary (ComfyUI's
  tokenizer), padded with the end token to 77, last layer after the final norm (SD1).

Pictures are compared as floats in [0, 1] before quantisation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.loading.convert.vae_diffusers import vae_diffusers_to_original
from core.models.clip import CLIPTextConfig, CLIPTextModel
from core.models.unet import UNetConfig, UNetModel
from core.models.vae import SD1_LATENT, AutoencoderKL, VAEConfig
from core.sampling import for_family, ksampler_sigmas
from core.text.conditioning import TextEncoders
from core.text.vocab import load_vocabulary

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

WIDTH = 32  # CLIP width = cross-attention width


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _randomize(model: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / math.sqrt(p[0].numel()))
            else:
                p.copy_(0.1 * noise)
    return model.eval()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    v = load_vocabulary()
    folder = tmp_path_factory.mktemp("clip_tokenizer")
    import json

    (folder / "vocab.json").write_text(json.dumps(v.vocab), encoding="utf-8")
    merges = "\n".join(f"{a} {b}" for a, b in v.merges)
    (folder / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
    return transformers.CLIPTokenizer.from_pretrained(
        str(folder), pad_token="<|endoftext|>", model_max_length=77
    )


@pytest.fixture(scope="module")
def pair(tokenizer: Any) -> tuple[Any, Networks]:
    hf_clip = _randomize(
        transformers.CLIPTextModel(
            transformers.CLIPTextConfig(
                vocab_size=49408, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                eos_token_id=49407, bos_token_id=49406, pad_token_id=49407, attn_implementation="eager",
            )
        ),
        1,
    )  # fmt: skip
    clip = CLIPTextModel(
        CLIPTextConfig(
            hidden_size=WIDTH, intermediate_size=64, num_layers=2, num_heads=4, hidden_act="quick_gelu"
        )
    )
    clip.load_state_dict(
        {k if k.startswith("text_model.") else f"text_model.{k}": v for k, v in hf_clip.state_dict().items()},
        strict=True,
    )
    unet_cfg = UNetConfig(
        in_channels=4, out_channels=4, model_channels=32, channel_mult=(1, 2), num_res_blocks=(2, 2),
        transformer_depth=(1, 1, 0, 0), transformer_depth_middle=1,
        transformer_depth_output=(0, 0, 0, 1, 1, 1), context_dim=WIDTH, num_heads=2, num_head_channels=None,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_unet = diffusers.UNet2DConditionModel(
        sample_size=8, block_out_channels=(32, 64), layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=WIDTH, attention_head_dim=2,
    )  # fmt: skip
    _randomize(hf_unet, 2)
    unet = UNetModel(unet_cfg).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), unet_cfg), strict=True)
    vae_cfg = VAEConfig(
        base_channels=32, channel_mult=(1, 2, 2, 2), num_res_blocks=1, norm_groups=32
    ).with_latent_format(SD1_LATENT)
    hf_vae = diffusers.AutoencoderKL(
        block_out_channels=vae_cfg.level_channels, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=1, latent_channels=4, norm_num_groups=32,
        scaling_factor=0.18215,
    )  # fmt: skip
    _randomize(hf_vae, 3)
    vae = AutoencoderKL(vae_cfg).eval()
    vae.load_state_dict(vae_diffusers_to_original(hf_vae.state_dict(), vae_cfg), strict=True)
    # "leading" spacing: only so that diffusers scales the first latent by sqrt(1 + sigma_max^2) as
    # ComfyUI does (with "linspace" it uses sigma_max alone); the sigmas themselves are ComfyUI's
    scheduler = diffusers.EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        timestep_spacing="leading",
        steps_offset=1,
    )
    pipe = diffusers.StableDiffusionPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sd1", unet, TextEncoders(clip_l=clip), vae)


def _diffusers_image(pipe: Any, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    ms = for_family("sd1")
    comfy_sigmas = ksampler_sigmas(ms, s.scheduler, s.sampler, s.steps)
    comfy_timesteps = ms.timestep(comfy_sigmas[:-1]).float()  # ComfyUI: the nearest table index
    sched = pipe.scheduler
    original = sched.set_timesteps

    def set_timesteps(
        num_inference_steps: Any = None, device: Any = None, timesteps: Any = None, sigmas: Any = None
    ) -> None:
        original(sigmas=comfy_sigmas.tolist(), device=device)
        sched.timesteps = comfy_timesteps.to(device or "cpu")

    sched.set_timesteps = set_timesteps
    try:
        noise = torch.randn(
            (settings.batch, 4, settings.height // 8, settings.width // 8),
            generator=torch.Generator("cpu").manual_seed(s.seed),
        )
        # "(red:1.0)" is ComfyUI's weighting syntax (weight 1: the plain word); diffusers reads text literally
        out = pipe(
            settings.prompt.replace("(red:1.0)", "red"), negative_prompt=settings.negative,
            num_inference_steps=s.steps,
            guidance_scale=s.cfg, latents=noise, height=settings.height, width=settings.width,
            output_type="np", sigmas=comfy_sigmas.tolist(),
        )  # fmt: skip
    finally:
        sched.set_timesteps = original
    return np.asarray(out.images)


@pytest.mark.parametrize("seed", [0, 123456789])
def test_euler_karras_equals_diffusers_set_up_as_comfyui(pair: tuple[Any, Networks], seed: int) -> None:
    pipe, nets = pair
    settings = ImageSettings(
        prompt="a tiny (red:1.0) fox, forest", negative="blurry", width=64, height=64, batch=1,
        sampling=Sampling(seed=seed, steps=6, cfg=6.0, sampler="euler", scheduler="karras"),
    )  # fmt: skip
    pixels, timings, _ = Pipeline(nets, Compute()).run(settings, Hooks())
    ours = ((pixels + 1) / 2).clamp(0, 1).permute(0, 2, 3, 1).numpy()
    theirs = _diffusers_image(pipe, settings)
    assert ours.shape == theirs.shape == (1, 64, 64, 3)
    assert float(np.abs(ours - theirs).max()) < 2e-5
    assert len(timings.steps) == 6
