"""A whole SD3 + ControlNet picture (InstantX's joint-block kind, loaded from its diffusers file)
against diffusers' StableDiffusion3ControlNetPipeline, tiny networks with random weights, set up as
ComfyUI computes (``test_parity_sd3``'s settings: ComfyUI's sigmas handed to a shift-1 flow
scheduler, ComfyUI's noise, T5 padded to 77, CLIP-L pooled unprojected).

The hint picture is given at the picture's size, so ComfyUI's centre-crop resize is the identity; it
reaches diffusers as the VAE's [-1, 1] input (a tensor goes through its image processor unchanged)
and the VAE's posterior is read at its mean, as ComfyUI encodes (diffusers samples it). The base
network is 128 wide (two 64-wide heads): ComfyUI's block rule (depth = width / 64 = 2, one
ControlNet block: its output once, after base block 0) and diffusers' (interval 2, never after the
last block) agree, so diffusers runs as it is."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.generate.controlnet import AppliedControlNet, ControlNetPass, ControlStack
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.controlnet import load_controlnet
from core.models.mmdit import MMDiT, MMDiTConfig
from core.sampling import for_family, ksampler_sigmas
from core.text.conditioning import SD3_CONTEXT_WIDTH
from tests.core.generate.reference import randomize, tame_output, to_unit_image
from tests.core.generate.sd3_controlnet_pair import diffusers_file, joint_controlnet
from tests.core.generate.sd3_parts import POOLED, sd3_parts

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Any, Any]:
    from core.archs.mmdit.keys import sd3_diffusers_to_original

    parts = sd3_parts(tmp_path_factory)
    config = MMDiTConfig(
        depth=2, num_heads=2, head_dim=64, pos_embed_max_size=8, context_dim=SD3_CONTEXT_WIDTH,
        adm_in_channels=POOLED,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_dit = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=64,
        num_attention_heads=2, joint_attention_dim=SD3_CONTEXT_WIDTH, caption_projection_dim=128,
        pooled_projection_dim=POOLED, pos_embed_max_size=8,
    )  # fmt: skip
    randomize(hf_dit, 51)
    tame_output(hf_dit.proj_out)
    dit = MMDiT(config).eval()
    dit.load_state_dict(sd3_diffusers_to_original(hf_dit.state_dict(), config), strict=True)
    hf_cn = joint_controlnet(2, 1, context=SD3_CONTEXT_WIDTH, pooled=POOLED, seed=52)
    for block in hf_cn.controlnet_blocks:  # residuals of a trained net's size next to the base's
        tame_output(block, 0.3)
    control = load_controlnet(diffusers_file(hf_cn, tmp_path_factory.mktemp("cn") / "cn.safetensors"))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.StableDiffusion3ControlNetPipeline(
        transformer=hf_dit, scheduler=scheduler, controlnet=hf_cn, **parts.diffusers
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sd3", dit, parts.encoders, parts.vae), parts.t5_tokenizer, control.module


def test_controlnet_picture_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

    pipe, nets, t5_tok, module = pair
    s = Sampling(seed=9, steps=4, cfg=4.0, sampler="euler", scheduler="karras")
    settings = ImageSettings(prompt="a fox", negative="blurry", width=64, height=80, sampling=s)
    hint = torch.rand(1, 3, 80, 64, generator=torch.Generator().manual_seed(3))
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    control = ControlNetPass(ControlStack([AppliedControlNet(module, hint, 0.8, full)]))
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[control])[0])
    plain = to_unit_image(Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())[0])
    sigmas = ksampler_sigmas(for_family("sd3"), s.scheduler, s.sampler, s.steps)
    noise = torch.randn((1, 16, 10, 8), generator=torch.Generator("cpu").manual_seed(s.seed))
    monkeypatch.setattr(DiagonalGaussianDistribution, "sample", lambda self, generator=None: self.mean)
    theirs = pipe(
        "a fox", negative_prompt="blurry", control_image=hint * 2 - 1, controlnet_conditioning_scale=0.8,
        num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(), guidance_scale=s.cfg, latents=noise,
        height=80, width=64, max_sequence_length=77, output_type="np",
    ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"sd3 controlnet: max |ours - diffusers| = {err:.1e}")
    # each model call agrees to ~4e-7 relative; the run to ~3e-5 on [0, 1] pixels (a random
    # network with large residuals amplifies last-bit differences more on gentle schedules: the
    # bound leaves room for that and for other CPUs' rounding)
    assert err < 1 / 255
    assert float(np.abs(ours - plain).max()) > 2e-2  # the ControlNet changed the picture
