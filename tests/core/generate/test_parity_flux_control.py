"""FLUX.1 Canny/Depth [dev] and FLUX.1 [dev] with a control LoRA against diffusers'
FluxControlPipeline (test-only reference), at the real width (3072, 24 heads of 128), one double
and one single block, random weights, written as artists have them and read back through
detection, the loader and the LoRA stack:

- the full control model (img_in 128 wide) in Black Forest Labs' layout;
- FLUX.1 [dev] (the same weights, img_in 64 wide) with a control LoRA in BFL's layout (img_in's
  factor 128 wide with a bias, a qkv with a bias, the q/k norm scales replaced) for Loadout, and
  the same LoRA in diffusers' layout for ``FluxControlPipeline.load_lora_weights`` (which widens
  ``x_embedder`` with zeros as ComfyUI's ``reshape_weight`` does).

diffusers is set up the way ComfyUI computes, as test_parity_flux_fill.py does (ComfyUI's sigmas,
CPU noise packed, T5 at 256 tokens, CFG 1, the control picture's latent the VAE's posterior mean:
:func:`encode_to_mean`), with the Depth template's FluxGuidance 10 and the LoRA at strength 1
(diffusers replaces the norms whatever the LoRA scale; ComfyUI's ``set`` patch interpolates them,
which tests/core/patching/test_lora_flux_control.py checks at 0.5).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from core.generate.control_picture import control_picture_pass
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_request import ControlPictureUse
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.flux import FluxConfig, pack_latents
from core.models.vae import FLUX_LATENT
from core.patching.lora_stack import LoraStack
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
from tests.core.generate.test_parity_flux_fill import encode_to_mean, picture

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytest.importorskip("peft")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]

L_WIDTH, T5_WIDTH, SIZE, GUIDANCE, HIDDEN, RANK = 32, 24, 64, 10.0, 3072, 4
PROMPT = "a stone house by a lake"
NORMS = {  # BFL's name -> diffusers'
    "double_blocks.0.img_attn.norm.query_norm.scale": "transformer_blocks.0.attn.norm_q.weight",
    "double_blocks.0.img_attn.norm.key_norm.scale": "transformer_blocks.0.attn.norm_k.weight",
    "double_blocks.0.txt_attn.norm.query_norm.scale": "transformer_blocks.0.attn.norm_added_q.weight",
    "double_blocks.0.txt_attn.norm.key_norm.scale": "transformer_blocks.0.attn.norm_added_k.weight",
    "single_blocks.0.norm.query_norm.scale": "single_transformer_blocks.0.attn.norm_q.weight",
    "single_blocks.0.norm.key_norm.scale": "single_transformer_blocks.0.attn.norm_k.weight",
}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The text encoders, tokenizers, VAE pairs, the control picture, and the random network's
    weights rounded to bf16 (diffusers' names, img_in 128 wide)."""
    root = tmp_path_factory.mktemp("flux_control")
    tok_l = clip_tokenizer(root / "clip_l", pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(root / "t5")
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=51)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=52)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=54)
    hf = _transformer(128)
    randomize(hf.to_empty(device="cpu"), 53)
    tame_output(hf.proj_out)
    half = {k: v.to(torch.bfloat16) for k, v in hf.state_dict().items()}
    del hf
    gc.collect()
    yield {
        "root": root, "tok_l": tok_l, "our_t5_tok": our_t5_tok, "hf_t5_tok": hf_t5_tok, "hf_l": hf_l,
        "clip_l": clip_l, "hf_t5": hf_t5, "t5": t5, "hf_vae": encode_to_mean(hf_vae), "vae": vae,
        "half": half, "rgb": picture(root / "edges.png"), "picture": root / "edges.png",
    }  # fmt: skip


def _transformer(inputs: int) -> Any:
    with torch.device("meta"):  # no init: every weight is drawn or copied
        return diffusers.FluxTransformer2DModel(
            patch_size=1, in_channels=inputs, out_channels=64, num_layers=1, num_single_layers=1,
            attention_head_dim=128, num_attention_heads=24, joint_attention_dim=T5_WIDTH,
            pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(16, 56, 56),
        )  # fmt: skip


def _filled(inputs: int, weights: dict[str, torch.Tensor]) -> Any:
    hf = _transformer(inputs).to_empty(device="cpu")
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(weights[name].float())
    return hf


def _write_ours(weights: dict[str, torch.Tensor], inputs: int, path: Path) -> None:
    config = FluxConfig(
        in_channels=inputs, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, depth=1,
        depth_single_blocks=1,
    )  # fmt: skip
    save_file({k: v.contiguous() for k, v in flux_diffusers_to_original(weights, config).items()}, str(path))


def _settings() -> ImageSettings:
    s = Sampling(seed=5, steps=2, sampler="euler", scheduler="simple", guidance=GUIDANCE)
    return ImageSettings(PROMPT, width=SIZE, height=SIZE, sampling=s)


def _theirs(p: dict[str, Any], transformer: Any, lora: dict[str, torch.Tensor] | None) -> np.ndarray:
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False
    )
    pipe = diffusers.FluxControlPipeline(
        scheduler=scheduler, vae=p["hf_vae"], text_encoder=p["hf_l"], tokenizer=p["tok_l"],
        text_encoder_2=p["hf_t5"], tokenizer_2=p["hf_t5_tok"], transformer=transformer,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    if lora is not None:
        pipe.load_lora_weights(dict(lora))
        assert tuple(pipe.transformer.x_embedder.weight.shape) == (HIDDEN, 128)
    s = _settings().sampling
    sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
    noise = torch.randn((1, 16, SIZE // 8, SIZE // 8), generator=torch.Generator("cpu").manual_seed(s.seed))
    out = pipe(
        PROMPT, control_image=Image.fromarray(p["rgb"]), num_inference_steps=s.steps,
        sigmas=sigmas[:-1].tolist(), guidance_scale=GUIDANCE, latents=pack_latents(noise), height=SIZE,
        width=SIZE, max_sequence_length=FLUX_T5_MIN_LENGTH, output_type="np",
    )  # fmt: skip
    return np.asarray(out.images)


def _ours(p: dict[str, Any], model: torch.nn.Module, stack: LoraStack | None) -> np.ndarray:
    nets = Networks("flux-dev", model, TextEncoders(clip_l=p["clip_l"], t5=p["t5"]), p["vae"])
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=p["our_t5_tok"])
    settings = ImageSettings(
        PROMPT, width=SIZE, height=SIZE, sampling=_settings().sampling,
        control_picture=ControlPictureUse(p["picture"]),
    )  # fmt: skip
    made = control_picture_pass(settings, pipeline, stack, "flux-dev", None)
    assert made is not None and pipeline.cfg(settings) == 1.0
    pixels, _, _ = pipeline.run(settings, Hooks(), passes=[made])
    return to_unit_image(pixels)


def _compare(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    err = float(np.abs(ours - theirs).max())
    print(f"{what}: max |ours - diffusers| = {err:.1e} ({err * 255:.2f}/255)")
    assert ours.shape == theirs.shape == (1, SIZE, SIZE, 3)
    assert err < 3 / 255


def test_flux_canny_depth_model_equals_diffusers_flux_control_pipeline(parts: dict[str, Any]) -> None:
    path = parts["root"] / "flux1-depth-dev.safetensors"
    _write_ours(parts["half"], 128, path)
    found = inspect_for_loading(path)[1]
    assert (found.family, found.variant) == ("flux-dev", "control")
    theirs = _theirs(parts, _filled(128, parts["half"]), None)
    gc.collect()
    ours = _ours(parts, load_diffusion_model(path).module, None)
    _compare(ours, theirs, "flux-depth")
    # the control picture steers it: without it (zeros in ComfyUI) the picture differs
    assert float(np.abs(ours - to_unit_image(torch.zeros(1, 3, 1, 1))).mean()) > 0.01


def _control_lora(seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(BFL's layout, diffusers' layout) of one control LoRA, bf16 values."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.05) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    a_in, b_in, bias_in = rand(RANK, 128), rand(HIDDEN, RANK), rand(HIDDEN)
    a_qkv, b_qkv, bias_qkv = rand(RANK, HIDDEN), rand(3 * HIDDEN, RANK), rand(3 * HIDDEN)
    norms = {name: (1.0 + rand(128, scale=0.2).float()).to(torch.bfloat16) for name in NORMS}
    bfl = {
        "img_in.lora_A.weight": a_in, "img_in.lora_B.weight": b_in, "img_in.lora_B.bias": bias_in,
        **{f"double_blocks.0.img_attn.qkv.{k}": v for k, v in (
            ("lora_A.weight", a_qkv), ("lora_B.weight", b_qkv), ("lora_B.bias", bias_qkv))},
        **norms,
    }  # fmt: skip
    hf = {
        "transformer.x_embedder.lora_A.weight": a_in, "transformer.x_embedder.lora_B.weight": b_in,
        "transformer.x_embedder.lora_B.bias": bias_in,
        **{f"transformer.{NORMS[k]}": v for k, v in norms.items()},
    }  # fmt: skip
    for i, name in enumerate(("to_q", "to_k", "to_v")):
        rows = slice(i * HIDDEN, (i + 1) * HIDDEN)
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_A.weight"] = a_qkv
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_B.weight"] = b_qkv[rows]
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_B.bias"] = bias_qkv[rows]
    return bfl, hf


def test_flux_dev_with_a_control_lora_equals_diffusers_load_lora_weights(parts: dict[str, Any]) -> None:
    half = dict(parts["half"])
    half["x_embedder.weight"] = half["x_embedder.weight"][:, :64].contiguous()
    base = parts["root"] / "flux1-dev.safetensors"
    _write_ours(half, 64, base)
    bfl, hf_lora = _control_lora(61)
    lora = parts["root"] / "flux1-depth-dev-lora.safetensors"
    save_file(bfl, str(lora))
    theirs = _theirs(parts, _filled(64, half), hf_lora)
    del half
    gc.collect()

    loaded = load_diffusion_model(base)
    assert loaded.family == "flux-dev"
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    assert not entry.skipped and not entry.report.unmatched and not entry.report.shape_mismatches
    stack.apply()
    assert tuple(loaded.module.img_in.weight.shape) == (HIDDEN, 128)
    ours = _ours(parts, loaded.module, stack)
    _compare(ours, theirs, "flux-dev + control LoRA")
    stack.unpatch()
    assert tuple(loaded.module.img_in.weight.shape) == (HIDDEN, 64)
