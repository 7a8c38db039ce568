"""A Qwen-Image picture with InstantX's ControlNets against diffusers' ``QwenImageControlNetPipeline``
and ``QwenImageControlNetInpaintPipeline`` (test-only references), set up as ComfyUI computes (the
settings of test_parity_qwen_image.py: ComfyUI's sigmas, CPU noise packed as the pipeline packs it,
``true_cfg_scale`` 1). Ours runs the engine's parts: the hint VAE-encoded per stage by
``ControlNetPass`` (its ``EncodeHints``, the inpainting net's picture blacked out under the
generation's mask and the mask concatenated; the ``ControlStack`` wrapper around every model call),
the residuals as the network's block patches.

Narrow networks (256 wide, two heads of 128; the blocks at the released width are proven in
tests/core/archs/test_qwen_controlnet.py); the prompt's hidden states drawn at random (the tower is
proven by test_parity_qwen_image.py). Where diffusers differs on purpose:

- it *samples* the VAE's posterior for the hint, ComfyUI takes its mean: the reference VAE's
  log-variance is set to -30 (a spread of 3e-7), so both take the mean;
- it resizes the inpainting mask to the latent with ``nearest``, ComfyUI with ``nearest-exact``:
  the mask is drawn in 16-pixel squares, where the two agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from core.archs.catalog import codec_for
from core.archs.wan_vae.keys import diffusers_to_original
from core.archs.wan_vae.network import WanVAEConfig
from core.detect.catalog import diffusion_spec
from core.generate.controlnet import AppliedControlNet, ControlNetPass, ControlStack
from core.generate.passes import Plan, Run
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline, Timings
from core.generate.png import to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.loading.loader import load_vae
from core.sampling import SamplingRequest, empty_latent, ksampler_sigmas, sample
from core.sampling.conditioning import Conditioning
from core.sampling.model_sampling import from_spec
from core.text.conditioning import TextEncoders
from tests.core.archs.test_wan_vae_parity import _random_reference
from tests.core.generate.reference_qwen_image import (
    blockwise_net,
    comfy_hint,
    comfy_residual,
    our_controlnet_from,
    ours_from,
    pack,
    qwen_controlnet_reference,
    qwen_image_reference,
)
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE = 42, 3, 64


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    hf = qwen_image_reference(dim=256, heads=2, layers=2, seed=31)
    hf_vae = _random_reference(diffusers.AutoencoderKLQwenImage)
    with torch.no_grad():  # the posterior's spread to 3e-7: diffusers' sample is the mean
        hf_vae.quant_conv.weight[16:] = 0.0
        hf_vae.quant_conv.bias[16:] = -30.0
    state = diffusers_to_original(hf_vae.state_dict(), WanVAEConfig(num_res_blocks=1))
    vae = load_vae(write_tensors(tmp_path_factory.mktemp("vae") / "qwen_image_vae.safetensors", state)).module
    ctx = torch.randn(1, 9, 3584, generator=torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(4)
    hint = torch.rand(1, 3, SIZE, SIZE, generator=gen)
    mask = torch.zeros(1, 1, SIZE, SIZE)
    mask[..., 16:48, 16:32] = 1.0  # white = repaint, in 16-pixel squares
    folder = tmp_path_factory.mktemp("pictures")
    Image.fromarray((mask[0, 0].numpy() * 255).astype(np.uint8)).save(folder / "mask.png")
    Image.fromarray(np.zeros((SIZE, SIZE, 3), np.uint8)).save(folder / "init.png")
    return {
        "folder": folder,
        "hf": hf,
        "hf_vae": hf_vae,
        "ours": ours_from(hf),
        "vae": vae,
        "ctx": ctx,
        "hint": hint,
        "mask": mask,
    }


def _ours(
    parts: dict[str, Any], cn: Any, strength: float, masked: bool, hint: torch.Tensor | None = None
) -> tuple[np.ndarray, Any]:
    """The picture and the hint latent the pass made (``masked``: the generation's mask, which the
    pass hands the inpainting net; the sampler here runs no noise mask, as diffusers' pipeline)."""
    nets = Networks("qwen-image", parts["ours"], TextEncoders(), parts["vae"])
    pipeline = Pipeline(nets, Compute())
    s = Sampling(seed=SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    folder = parts["folder"]
    inpaint = {"init_image": folder / "init.png", "mask_image": folder / "mask.png"} if masked else {}
    settings = ImageSettings(prompt="", width=SIZE, height=SIZE, sampling=s, **inpaint)  # type: ignore[arg-type]
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    net = AppliedControlNet(cn, parts["hint"] if hint is None else hint, strength, full)
    plan = Plan(pipeline)
    ControlNetPass(ControlStack([net])).plan(plan, settings)
    cells = (SIZE // 8, SIZE // 8)
    (encode,) = plan.stage_patches
    encode(settings, cells, Run(pipeline, settings, Hooks(), Timings(), None))
    request = SamplingRequest(SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    fmt = pipeline.latent_format
    latent = sample(
        pipeline.adapter, pipeline.sampling, fmt, empty_latent(1, SIZE, SIZE, fmt),
        Conditioning(parts["ctx"]), None, request, patches=plan.patches,
    )  # fmt: skip
    with torch.no_grad():
        picture = to_uint8_rgb(codec_for("qwen-image").decode(parts["vae"], latent)[0].float())
    return picture.astype(np.int32), net.latents[cells]


def _theirs(parts: dict[str, Any], pipe_cls: Any, hf_cn: Any, strength: float, **control: Any) -> np.ndarray:
    sampling = from_spec(diffusion_spec("qwen-image").sampling, "qwen-image")
    sigmas = ksampler_sigmas(sampling, "simple", "euler", STEPS)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    net = {} if hf_cn is None else {"controlnet": hf_cn}
    if hf_cn is not None:
        control["controlnet_conditioning_scale"] = strength
    pipe = pipe_cls(
        scheduler=scheduler, vae=parts["hf_vae"], text_encoder=None, tokenizer=None, transformer=parts["hf"],
        **net,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    noise = torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=torch.Generator("cpu").manual_seed(SEED))
    ctx = parts["ctx"]
    with torch.no_grad():
        images = pipe(
            prompt_embeds=ctx, prompt_embeds_mask=torch.ones(ctx.shape[:2], dtype=torch.long),
            sigmas=[float(v) for v in sigmas[:-1]], num_inference_steps=STEPS, height=SIZE, width=SIZE,
            true_cfg_scale=1.0, latents=pack(noise), output_type="np", **control,
        ).images  # fmt: skip
    return np.round(images[0] * 255).astype(np.int32)


def _compare(name: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    diff = np.abs(ours - theirs)
    print(
        f"{name}: max |ours - diffusers| = {diff.max()}/255, mean {diff.mean():.3f}; spread {ours.std():.1f}"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() > 5


def test_union_controlnet_picture_matches_the_controlnet_pipeline(parts: dict[str, Any]) -> None:
    hf_cn = qwen_controlnet_reference(parts["hf"], seed=12)
    ours, hint = _ours(parts, our_controlnet_from(hf_cn), 0.8, False)
    theirs = _theirs(
        parts, diffusers.QwenImageControlNetPipeline, hf_cn, 0.8, control_image=parts["hint"] * 2 - 1
    )
    _compare("union", ours, theirs)
    weak, _ = _ours(parts, our_controlnet_from(hf_cn), 0.1, False)
    assert np.abs(ours - weak).max() > 10  # the ControlNet's strength shows
    assert hint.shape == (1, 16, 8, 8)


def test_inpainting_controlnet_picture_matches_the_inpaint_pipeline(parts: dict[str, Any]) -> None:
    hf_cn = qwen_controlnet_reference(parts["hf"], extra=4, seed=13)
    cn = our_controlnet_from(hf_cn)
    ours, hint = _ours(parts, cn, 1.0, True)
    theirs = _theirs(
        parts, diffusers.QwenImageControlNetInpaintPipeline, hf_cn, 1.0,
        control_image=parts["hint"] * 2 - 1, control_mask=parts["mask"],
    )  # fmt: skip
    _compare("inpaint", ours, theirs)
    unmasked, whole = _ours(parts, cn, 1.0, False)
    keep = torch.ones(8, 8)
    keep[2:6, 2:4] = 0.0  # the kept part at the latent's size, after the latent's 16 channels
    assert torch.equal(hint[0, 16], keep) and torch.equal(whole[0, 16], torch.ones(8, 8))
    assert not torch.equal(hint[:, :16], whole[:, :16])  # the repainted part blacked out
    assert np.abs(ours - unmasked).max() > 0


def _comfy_blockwise_latent(
    parts: dict[str, Any], picture: torch.Tensor, keep: torch.Tensor | None
) -> torch.Tensor:
    """ComfyUI's DiffSynth hint: the picture centre-cropped to the latent's aspect and resized with
    ``area``, VAE-encoded (the mean), into the Wan 2.1 latent space; the inpainting net's kept part
    resized ``bilinear`` to the latent, uncropped (ones without a mask)."""
    rows = picture.shape[-2] - picture.shape[-1]
    square = picture[..., rows // 2 : picture.shape[-2] - rows // 2, :]
    pixels = torch.nn.functional.interpolate(square, size=(SIZE, SIZE), mode="area")
    vae = parts["hf_vae"]
    latent = vae.encode(pixels[:, :, None] * 2 - 1).latent_dist.mode()[:, :, 0]
    mean = torch.tensor(vae.config.latents_mean).view(1, 16, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, 16, 1, 1)
    latent = (latent - mean) / std
    if keep is None:
        return latent
    return torch.cat(
        [latent, torch.nn.functional.interpolate(keep, size=latent.shape[-2:], mode="bilinear")], 1
    )


def _hooked(parts: dict[str, Any], net: Any, hint: torch.Tensor, strength: float) -> list[Any]:
    """diffusers' transformer with ComfyUI's ``DiffSynthCnetPatch`` after each block (forward hooks;
    diffusers packs the picture's tokens in ComfyUI's order)."""
    sd = net.state_dict()
    tokens = comfy_hint(sd, hint)

    def hook(i: int) -> Any:
        def add(module: Any, args: Any, out: tuple[torch.Tensor, torch.Tensor]) -> Any:
            txt, img = out
            return txt, img + comfy_residual(sd, i, img, tokens) * strength

        return add

    return [block.register_forward_hook(hook(i)) for i, block in enumerate(parts["hf"].transformer_blocks)]


@pytest.mark.parametrize("masked", [False, True], ids=["canny", "inpaint"])
def test_blockwise_controlnet_picture_matches_comfyui_on_the_pipeline(
    parts: dict[str, Any], masked: bool
) -> None:
    """DiffSynth's nets (canny/depth: the picture alone; inpaint: with the generation's mask) on a
    96x80 picture (cropped and resized to the latent), against diffusers' ``QwenImagePipeline``
    with ComfyUI's patch computed after each of its blocks."""
    net = blockwise_net(256, 2, 1 if masked else 0, seed=21 + masked)
    picture = torch.rand(1, 3, 96, 80, generator=torch.Generator().manual_seed(6))
    ours, hint = _ours(parts, net, 0.8, masked, picture)
    with torch.no_grad():
        want = _comfy_blockwise_latent(parts, picture, 1 - parts["mask"] if masked else None)
    assert float((hint - want).abs().max()) < 1e-4 * float(want.abs().max())
    handles = _hooked(parts, net, want, 0.8)
    try:
        theirs = _theirs(parts, diffusers.QwenImagePipeline, None, 0.8)
    finally:
        for handle in handles:
            handle.remove()
    _compare("blockwise inpaint" if masked else "blockwise", ours, theirs)
    plain = _theirs(parts, diffusers.QwenImagePipeline, None, 0.8)
    assert np.abs(theirs - plain).max() > 10  # the net's residuals show
