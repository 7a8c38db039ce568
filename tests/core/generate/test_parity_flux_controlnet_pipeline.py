"""A whole Flux-dev + InstantX union ControlNet run against diffusers' FluxControlNetPipeline (tiny
networks, random weights), set up as ComfyUI computes: the settings of test_parity_flux.py (ComfyUI's
sigmas handed to a shift-1 scheduler, CPU noise packed, T5 at 256 tokens, CFG 1, guidance 3.5), and
for the ControlNet ComfyUI's ``get_control`` with a VAE:

- the hint picture at the picture's size (ComfyUI's resize is then the identity), ``* 2 - 1``,
  VAE-encoded to its posterior mean (ComfyUI's ``vae.encode``; diffusers samples the posterior, so
  its VAE is made deterministic as in test_parity_flux_fill.py) and put into Flux's latent space;
- control type ``depth`` (index 2; diffusers' ``control_mode=2``), start 0 / end 1 (diffusers keeps a
  ControlNet by step fraction, ComfyUI by sigma: the same for the whole range).

The ControlNet is a diffusers ``FluxControlNetModel`` file read back through detection and the loader;
one double and one single block, so ComfyUI's spreading over 19 + 38 blocks and diffusers' interval
over the base's blocks give every base block its one output.

Alimama's inpainting net (``controlnet_x_embedder`` over 17 channels per cell) has no diffusers class
or pipeline: the reference is ``FluxControlNetPipeline`` with the net's embedder taking the kept
part's 2x2 patch after the latent's (as Alimama's own pipeline concatenates and packs them), the
picture handed over already blacked out, both as ComfyUI's ``ControlNetInpaintingAliMamaApply``
computes them (the kept part is ``1 - mask``, the mask white where repainted; the mask in 8-pixel
squares, so the latent's mask is the value at each square's centre however it is resized)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from core.generate.controlnet import AppliedControlNet, ControlNetPass, ControlStack
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.controlnet import load_controlnet
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
from tests.core.generate.test_parity_flux_fill import encode_to_mean

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

L_WIDTH, T5_WIDTH, SIZE = 32, 24, 64
DIT: dict[str, Any] = {
    "patch_size": 1, "in_channels": 64, "attention_head_dim": 16, "num_attention_heads": 2,
    "joint_attention_dim": T5_WIDTH, "pooled_projection_dim": L_WIDTH, "guidance_embeds": True,
    "axes_dims_rope": (8, 4, 4),  # what a 16-wide head gets from rope_axes (the split is not in files)
}  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Any, Any]:
    root = tmp_path_factory.mktemp("flux_cn")
    tok_l = clip_tokenizer(root / "clip_l", pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(root / "t5")
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=31)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=32)
    config = FluxConfig(
        in_channels=64, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, hidden_size=32,
        num_heads=2, depth=1, depth_single_blocks=2, axes_dim=(8, 4, 4), guidance_embed=True,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_flux = randomize(diffusers.FluxTransformer2DModel(num_layers=1, num_single_layers=2, **DIT), 33)
    tame_output(hf_flux.proj_out)
    flux = Flux(config).eval()
    flux.load_state_dict(flux_diffusers_to_original(hf_flux.state_dict(), config), strict=True)
    hf_cn = randomize(diffusers.FluxControlNetModel(num_layers=1, num_single_layers=1, num_mode=7, **DIT), 35)
    with torch.no_grad():  # outputs of a trained net's size beside the base's activations
        for layer in (*hf_cn.controlnet_blocks, *hf_cn.controlnet_single_blocks):
            layer.weight.mul_(0.3)
    path = root / "FLUX.1-dev-Controlnet-Union.safetensors"
    save_file({k: v.contiguous() for k, v in hf_cn.state_dict().items()}, str(path))
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=34)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.FluxControlNetPipeline(
        scheduler=scheduler, vae=encode_to_mean(hf_vae), text_encoder=hf_l, tokenizer=tok_l,
        text_encoder_2=hf_t5, tokenizer_2=hf_t5_tok, transformer=hf_flux, controlnet=hf_cn,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    nets = Networks("flux-dev", flux, TextEncoders(clip_l=clip_l, t5=t5), vae)
    return pipe, nets, our_t5_tok, load_controlnet(path)


@pytest.mark.parametrize("strength", [1.0, 0.6])
def test_flux_union_controlnet_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any, Any], strength: float
) -> None:
    pipe, nets, t5_tok, loaded = pair
    s = Sampling(seed=3, steps=3, sampler="euler", scheduler="simple")
    settings = ImageSettings("a tiny red fox", width=SIZE, height=SIZE, sampling=s)
    hint = torch.rand(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    depth = loaded.control_types.index("depth")
    applied = AppliedControlNet(loaded.module, hint, strength, full, control_type=depth)
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[ControlNetPass(ControlStack([applied]))])[0])
    plain = to_unit_image(Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())[0])

    sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
    noise = torch.randn((1, 16, SIZE // 8, SIZE // 8), generator=torch.Generator("cpu").manual_seed(s.seed))
    theirs = pipe(
        settings.prompt, control_image=hint * 2 - 1, control_mode=depth, num_inference_steps=s.steps,
        sigmas=sigmas[:-1].tolist(), guidance_scale=3.5, latents=pack_latents(noise), height=SIZE,
        width=SIZE, max_sequence_length=FLUX_T5_MIN_LENGTH, output_type="np",
        controlnet_conditioning_scale=strength,
    ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"flux union controlnet strength {strength}: max |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
    assert float(np.abs(ours - plain).max()) > 1e-2  # the ControlNet changed the picture


def test_the_hint_is_encoded_once_per_size(pair: tuple[Any, Networks, Any, Any], tmp_path: Path) -> None:
    _, nets, t5_tok, loaded = pair
    s = Sampling(seed=3, steps=2, sampler="euler", scheduler="simple")
    settings = ImageSettings("a fox", width=SIZE, height=SIZE, sampling=s)
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    applied = AppliedControlNet(loaded.module, torch.rand(1, 3, 96, 80), 1.0, full)
    pipeline.run(settings, Hooks(), passes=[ControlNetPass(ControlStack([applied]))])
    assert list(applied.latents) == [(SIZE // 8, SIZE // 8)]
    assert applied.latents[(8, 8)].shape == (1, 16, 8, 8)


class _KeptPartBeside(nn.Module):
    """Alimama's ``controlnet_x_embedder`` fed as its pipeline feeds it: the packed latent with the
    packed kept part after it (17 channels, channel-major per 2x2 patch: ComfyUI's packing)."""

    def __init__(self, embedder: nn.Linear, kept: torch.Tensor) -> None:
        super().__init__()
        self.embedder, self.kept = embedder, kept

    def forward(self, cond: torch.Tensor) -> torch.Tensor:
        return self.embedder(torch.cat((cond, self.kept.expand(cond.shape[0], -1, -1)), dim=-1))


def test_alimama_inpainting_controlnet_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any, Any], tmp_path: Path
) -> None:
    pipe, nets, t5_tok, _ = pair
    hf_cn = randomize(diffusers.FluxControlNetModel(num_layers=1, num_single_layers=1, **DIT), 36)
    hf_cn.controlnet_x_embedder = randomize(nn.Linear(17 * 4, 32), 37)
    with torch.no_grad():
        for layer in (*hf_cn.controlnet_blocks, *hf_cn.controlnet_single_blocks):
            layer.weight.mul_(0.3)
    path = tmp_path / "FLUX.1-dev-Controlnet-Inpainting-Beta.safetensors"
    save_file({k: v.contiguous() for k, v in hf_cn.state_dict().items()}, str(path))
    loaded = load_controlnet(path)
    assert loaded.module.mask_hint and loaded.control_types == ()

    s = Sampling(seed=5, steps=3, sampler="euler", scheduler="simple")
    settings = ImageSettings("a tiny red fox", width=SIZE, height=SIZE, sampling=s)
    picture = torch.rand(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(6))
    mask = torch.zeros(1, 1, SIZE, SIZE)
    mask[..., 8:40, 16:56] = 1.0  # white: repainted
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    applied = AppliedControlNet(loaded.module, picture, 0.9, full, mask=mask)
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[ControlNetPass(ControlStack([applied]))])[0])
    unmasked = AppliedControlNet(loaded.module, picture, 0.9, full)
    whole = to_unit_image(
        pipeline.run(settings, Hooks(), passes=[ControlNetPass(ControlStack([unmasked]))])[0]
    )

    kept = 1.0 - mask
    hf_cn.controlnet_x_embedder = _KeptPartBeside(
        hf_cn.controlnet_x_embedder, pack_latents(kept[..., 4::8, 4::8])
    )
    inpaint = diffusers.FluxControlNetPipeline(**{**pipe.components, "controlnet": hf_cn})
    inpaint.set_progress_bar_config(disable=True)
    sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
    noise = torch.randn((1, 16, SIZE // 8, SIZE // 8), generator=torch.Generator("cpu").manual_seed(s.seed))
    theirs = inpaint(
        settings.prompt, control_image=picture * kept * 2 - 1, num_inference_steps=s.steps,
        sigmas=sigmas[:-1].tolist(), guidance_scale=3.5, latents=pack_latents(noise), height=SIZE,
        width=SIZE, max_sequence_length=FLUX_T5_MIN_LENGTH, output_type="np",
        controlnet_conditioning_scale=0.9,
    ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"alimama inpainting controlnet: max |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
    assert float(np.abs(ours - whole).max()) > 1e-3  # the mask changed the picture
