"""A whole Z-Image + Fun ControlNet picture against diffusers' ``ZImageControlNetPipeline``
(test-only reference) set up as ComfyUI computes: the settings of test_parity_nextdit (ComfyUI's
sigmas, CPU noise, CFG 1 as guidance 0), the prompt's hidden states given to both, and diffusers'
modules wired as ComfyUI's model patch computes (reference_zimage_control). The first release's
form (16 hint channels): the 2.x files' extra channels differ by design (diffusers pads zeros,
ComfyUI encodes a grey picture: docs/families.md). The hint is given at the picture's size, so
neither side resizes it; ours goes through the ControlNet pass's own hint encoding
(``EncodeHints``) and stack; the pipeline takes a tensor hint as it is, in [-1, 1]. Small networks
(256 wide; the released width is tests/core/models/test_zimage_fun_control.py's).

The 2.1 form's inpainting inputs (a picture to inpaint and its mask beside the control picture)
against ``ZImageControlNetInpaintPipeline``, which builds the 33 channels as ComfyUI's
``ZImageFunControlnet`` does with ``inpaint_image`` and ``mask``: the control latent, the kept part
(``1 - mask``, ``nearest`` to the latent) and the latent of the picture greyed where it is
repainted (diffusers zeroes it in [-1, 1], ComfyUI sets it to 0.5 in [0, 1]: the same). The mask
is drawn in 16-pixel squares at the picture's size, so ComfyUI's bilinear-and-round and diffusers'
threshold agree; the pipeline starts from noise as ComfyUI's txt2img sampler, so ours runs no noise
mask here (the command's inpainting adds one: test_generate_zimage_control.py). The same with no
control picture (ComfyUI's node takes ``image`` as optional): the control part is the latent of a
0.5-grey picture, given to the pipeline as its control image."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.archs.conditioning import Conditioning
from core.archs.nextdit.fun_control import ZImageFunControl
from core.detect.catalog import diffusion_spec
from core.generate.controlnet import AppliedControlNet, ControlStack, EncodeHints
from core.generate.passes import Run
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline, Timings
from core.generate.png import to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.models.vae import FLUX_LATENT
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.sampling.patches import ModelPatches
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import vae_pair
from tests.core.generate.reference_nextdit import ours_from, z_image_reference
from tests.core.generate.reference_zimage_control import comfy_wired, control_reference
from tests.core.generate.test_parity_nextdit import _sigmas
from tests.core.models.test_zimage_fun_control import _ours

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread")]

SEED, STEPS, SIZE = 42, 3, 128  # 16 x 16 latent cells: 64 picture tokens, no pads


def _ours_picture(
    dit: Any,
    module: ZImageFunControl,
    vae: Any,
    embeds: torch.Tensor,
    hint: torch.Tensor | None,
    strength: float,
    inpaint: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> np.ndarray:
    family = "z-image"
    spec = diffusion_spec(family)
    sampling = from_spec(spec.sampling, family)
    pipeline = Pipeline(Networks(family, dit, TextEncoders(), vae), Compute())
    full = (sampling.percent_to_sigma(0.0), sampling.percent_to_sigma(1.0))
    net = AppliedControlNet(module, hint, strength, full, downscale=8)
    if inpaint is not None:  # the picture to inpaint and the mask, as the pass hands them over
        net.inpaint, net.mask = inpaint
    settings = ImageSettings(prompt="", width=SIZE, height=SIZE, sampling=Sampling(seed=SEED, steps=STEPS))
    run = Run(pipeline, settings, Hooks(), Timings(), None)
    EncodeHints([net])(settings, (SIZE // 8, SIZE // 8), run)
    fmt = latent_format_for(family)
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    latent = sample(
        NetworkAdapter(dit, convention=spec.network), sampling, fmt, empty_latent(1, SIZE, SIZE, fmt),
        Conditioning(embeds[None]), None, request, patches=ModelPatches(wrappers=(ControlStack([net]),)),
    )  # fmt: skip
    with torch.no_grad():
        pixels = vae.decode(latent, scaled=False)
    return to_uint8_rgb(pixels[0].float())


def _theirs(
    hf: Any, cn: Any, hf_vae: Any, embeds: torch.Tensor, hint: torch.Tensor, strength: float
) -> np.ndarray:
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.ZImageControlNetPipeline(
        vae=hf_vae, text_encoder=None, tokenizer=None, transformer=hf, controlnet=cn, scheduler=scheduler
    )
    noise = torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))
    with comfy_wired(hf, cn, (SIZE // 16) ** 2, strength), torch.no_grad():
        out = pipe(
            prompt_embeds=[embeds], control_image=hint * 2 - 1, controlnet_conditioning_scale=strength,
            sigmas=_sigmas("z-image"), num_inference_steps=STEPS, height=SIZE, width=SIZE, guidance_scale=0.0,
            latents=noise, output_type="np",
        ).images  # fmt: skip
    return np.round(out[0] * 255).astype(np.int32)


@pytest.mark.parametrize("strength", [1.0, 0.6])
def test_a_controlled_picture_matches_zimage_controlnet_pipeline(strength: float) -> None:
    hf = z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=64, seed=31)
    cn = control_reference(hf, layers=2, in_dim=16, refiner=None, refiners=2, seed=35)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=32)
    dit, module = ours_from(hf), _ours(cn)
    gen = torch.Generator().manual_seed(4)
    embeds = torch.randn(32, 64, generator=gen)
    hint = torch.rand(1, 3, SIZE, SIZE, generator=gen)
    ours = _ours_picture(dit, module, vae, embeds, hint, strength)
    theirs = _theirs(hf, cn, hf_vae, embeds, hint, strength)
    plain = _ours_picture(dit, module, vae, embeds, hint, 0.0)
    diff = np.abs(ours.astype(np.int32) - theirs)
    moved = np.abs(ours.astype(np.int32) - plain.astype(np.int32)).max()
    print(f"strength {strength}: max |ours - diffusers| = {diff.max()}/255 (mean {diff.mean():.3f}); {moved}")
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5 and moved > 10


@pytest.mark.parametrize("control", [True, False])
def test_the_inpainting_inputs_match_zimage_controlnet_inpaint_pipeline(control: bool) -> None:
    """With a control picture, and without one (ComfyUI's ``ZImageFunControlnet`` with no
    ``image``: the control part is the latent of a 0.5-grey picture, which diffusers, requiring
    a control image, is given as 0 in [-1, 1])."""
    hf = z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=64, seed=31)
    cn = control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2, seed=36)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=32)
    dit, module = ours_from(hf), _ours(cn)
    assert module.inpaint_inputs
    gen = torch.Generator().manual_seed(7)
    embeds = torch.randn(32, 64, generator=gen)
    hint, picture = torch.rand(1, 3, SIZE, SIZE, generator=gen), torch.rand(1, 3, SIZE, SIZE, generator=gen)
    mask = torch.zeros(1, 1, SIZE, SIZE)
    mask[..., 32:96, 16:80] = 1.0  # white: repainted
    ours = _ours_picture(dit, module, vae, embeds, hint if control else None, 0.8, (picture, mask))
    # with a control picture, none to inpaint: grey, zero mask; without, the net left out
    nothing = _ours_picture(dit, module, vae, embeds, hint, 0.8 if control else 0.0)
    given = hint if control else torch.full_like(hint, 0.5)

    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.ZImageControlNetInpaintPipeline(
        vae=hf_vae, text_encoder=None, tokenizer=None, transformer=hf, controlnet=cn, scheduler=scheduler
    )
    noise = torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))
    with comfy_wired(hf, cn, (SIZE // 16) ** 2, 0.8), torch.no_grad():
        out = pipe(
            prompt_embeds=[embeds], image=picture * 2 - 1, mask_image=mask, control_image=given * 2 - 1,
            controlnet_conditioning_scale=0.8, sigmas=_sigmas("z-image"), num_inference_steps=STEPS,
            height=SIZE, width=SIZE, guidance_scale=0.0, latents=noise, output_type="np",
        ).images  # fmt: skip
    theirs = np.round(out[0] * 255).astype(np.int32)
    diff = np.abs(ours.astype(np.int32) - theirs)
    moved = np.abs(ours.astype(np.int32) - nothing.astype(np.int32)).max()
    print(f"inpainting ({control=}): max |ours - diffusers| {diff.max()}/255 mean {diff.mean():.2f}, {moved}")
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 2 and ours.std() > 5 and moved > diff.max() + 2  # the inputs reached the net
