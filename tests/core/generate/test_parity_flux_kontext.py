"""FLUX.1 Kontext: the whole edited picture against diffusers' ``FluxKontextPipeline`` (test-only
reference) set up as ComfyUI computes, Kontext files told from Flux dev files by their names, and
several references placed as ComfyUI's "offset" method places them.

Ours is a Loadout generation's plan: the reference picture read from a PNG file, scaled by
Kontext's rule (``FluxKontextImageScale``: the preferred size of the closest aspect ratio, centre
crop, Lanczos), VAE-encoded and attached to the prompt's conditioning (``ReferenceLatent``), the
network taking it as more tokens at index 1, the Flux prompt encoding, ComfyUI's Flux sampling
(shift 1.15, ``euler``, ``simple``), FluxGuidance 2.5 and CFG 1, the VAE's decode. diffusers gets
ComfyUI's sigmas (no dynamic shift), CPU noise packed into 2x2 patches, T5 padded to 256, and the
picture as ComfyUI scaled it (``_auto_resize=False``: diffusers would stretch to the preferred size
without ComfyUI's centre crop; docs/families.md).

Random weights: the transformer has Flux's real heads (128 wide, rope axes 16/56/56), two of them,
one double and one single block; narrow CLIP-L, T5 and a 16-channel VAE. The preferred sizes are
Kontext's rule over a list of small sizes (its real list is ~1 MP pictures, 4,096 tokens each: the
list itself is diffusers' and ComfyUI's, checked in ``test_references.py``).
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from core.archs.catalog import REFERENCES
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.references import ReferencePass, read_references, scaled_reference
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.flux import Flux, FluxConfig, make_img_ids, pack_latents, reference_tokens
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
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]

L_WIDTH, T5_WIDTH, FAMILY = 32, 24, "flux-kontext"
SMALL = ((96, 64), (64, 64), (64, 96))  # Kontext's rule over small sizes
STEPS_WIDE = 1  # the real-width network: one step (~13 s a forward on two busy cores)


def _config() -> FluxConfig:
    return FluxConfig(
        in_channels=64, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, hidden_size=256,
        num_heads=2, depth=1, depth_single_blocks=1, axes_dim=(16, 56, 56), guidance_embed=True,
    )  # fmt: skip


@dataclass(frozen=True)
class Encoders:
    """The narrow prompt encoders and VAE both libraries share (ours and diffusers' copies)."""

    tok_l: Any
    hf_l: Any
    hf_t5_tok: Any
    hf_t5: Any
    hf_vae: Any
    our_t5_tok: Any
    texts: TextEncoders
    vae: Any


@pytest.fixture(scope="module")
def encoders(tmp_path_factory: pytest.TempPathFactory) -> Encoders:
    tok_l = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(tmp_path_factory.mktemp("t5"))
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=41)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=42)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=44)
    texts = TextEncoders(clip_l=clip_l, t5=t5)
    return Encoders(tok_l, hf_l, hf_t5_tok, hf_t5, hf_vae, our_t5_tok, texts, vae)


def _kontext_pipeline(parts: Encoders, hf_flux: Any) -> Any:
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.FluxKontextPipeline(
        scheduler=scheduler, vae=parts.hf_vae, text_encoder=parts.hf_l, tokenizer=parts.tok_l,
        text_encoder_2=parts.hf_t5, tokenizer_2=parts.hf_t5_tok, transformer=hf_flux,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def pair(encoders: Encoders) -> tuple[Any, Networks, Any]:
    hf_flux = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=64, out_channels=64, num_layers=1, num_single_layers=1,
        attention_head_dim=128, num_attention_heads=2, joint_attention_dim=T5_WIDTH,
        pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(16, 56, 56),
    )  # fmt: skip
    randomize(hf_flux, 43)
    tame_output(hf_flux.proj_out)
    flux = Flux(_config()).eval()
    flux.load_state_dict(flux_diffusers_to_original(hf_flux.state_dict(), _config()), strict=True)
    pipe = _kontext_pipeline(encoders, hf_flux)
    return pipe, Networks(FAMILY, flux, encoders.texts, encoders.vae), encoders.our_t5_tok


def _picture(path: Path, w: int, h: int) -> Path:
    small = np.random.default_rng(5).integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(path)
    return path


def _settings(refs: tuple[Path, ...] = (), steps: int = 4) -> ImageSettings:
    sampling = Sampling(seed=7, steps=steps, sampler="euler", scheduler="simple", guidance=2.5)
    return ImageSettings("make the sky green", width=96, height=64, sampling=sampling, references=refs)


def _edit(
    nets: Networks, t5_tok: Any, ref: Path, steps: int = 4
) -> tuple[np.ndarray, Image.Image, ImageSettings]:
    """Ours: the edit as a Loadout plan (Kontext's rule over SMALL), and the scaled reference as
    ComfyUI's FluxKontextImageScale hands it on, for diffusers."""
    rule = replace(REFERENCES["kontext"], sizes=SMALL)  # type: ignore[type-var]
    (picture,) = read_references((ref,), FAMILY)
    settings = _settings((ref,), steps)
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    pixels, _, _ = pipeline.run(settings, Hooks(), None, [ReferencePass((picture,), rule)])
    scaled = scaled_reference(picture, rule, 8)[0]
    assert tuple(scaled.shape) == (3, 64, 96)
    shown = Image.fromarray((scaled.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy())
    return to_unit_image(pixels), shown, settings


def _theirs(pipe: Any, shown: Image.Image, settings: ImageSettings) -> np.ndarray:
    """diffusers as ComfyUI computes: its sigmas, CPU noise packed, T5 at 256, the picture as
    ComfyUI scaled it (no resizing of diffusers' own)."""
    s = settings.sampling
    sigmas = ksampler_sigmas(for_family(FAMILY), s.scheduler, s.sampler, s.steps)
    noise = torch.randn((1, 16, 8, 12), generator=torch.Generator("cpu").manual_seed(s.seed))
    with torch.no_grad():
        out = pipe(
            image=shown, prompt=settings.prompt, num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(),
            guidance_scale=2.5, true_cfg_scale=1.0, latents=pack_latents(noise), height=64, width=96,
            max_sequence_length=FLUX_T5_MIN_LENGTH, output_type="np", _auto_resize=False,
            max_area=96 * 64,
        ).images  # fmt: skip
    return np.asarray(out, dtype=np.float32)


def test_kontext_edit_matches_flux_kontext_pipeline(pair: tuple[Any, Networks, Any], tmp_path: Path) -> None:
    pipe, nets, t5_tok = pair
    ours, shown, settings = _edit(nets, t5_tok, _picture(tmp_path / "photo.png", 120, 72))
    # aspect 1.67: 96 x 64, centre-cropped to 1.5
    without = to_unit_image(Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(_settings(), Hooks())[0])
    theirs = _theirs(pipe, shown, settings)
    err, moved = float(np.abs(ours - theirs).max()), float(np.abs(ours - without).mean())
    print(
        f"flux kontext: max |ours - diffusers| = {err * 255:.4f}/255; "
        f"the reference moves it {moved * 255:.3f}/255"
    )
    assert ours.shape == theirs.shape == (1, 64, 96, 3)
    assert err * 255 < 3 and float(ours.std()) > 0.05
    assert moved > 20 * float(np.abs(ours - theirs).mean())  # dropped references would fail here


def _real_width_files(folder: Path) -> tuple[Any, Path, Path]:
    """diffusers' transformer at FLUX.1's real width (3072: 24 heads of 128, 64 channels in and
    out), one double and one single block, and its bf16 files in BFL's / Comfy's layout
    (``double_blocks.0.img_attn.qkv``) and diffusers' (``attn.to_q``); diffusers' copy computes in
    fp32 on exactly the stored weights. The weights are :func:`randomize`'s scales over windows of
    one pool of normal numbers at random offsets (drawing all 540M would take most of a minute on
    two busy cores); one fp32 copy of the network is made, after the files are written."""
    with torch.device("meta"):  # no init: every weight is drawn below
        hf = diffusers.FluxTransformer2DModel(
            patch_size=1, in_channels=64, out_channels=64, num_layers=1, num_single_layers=1,
            attention_head_dim=128, num_attention_heads=24, joint_attention_dim=T5_WIDTH,
            pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(16, 56, 56),
        )  # fmt: skip
    gen = torch.Generator().manual_seed(47)
    pool = torch.randn(1 << 26, generator=gen).to(torch.bfloat16)
    state = {}
    for key, p in hf.named_parameters():
        start = int(torch.randint(0, pool.numel() - p.numel() + 1, (1,), generator=gen))
        noise = pool[start : start + p.numel()].view(p.shape)
        if "norm" in key and key.endswith("weight"):
            state[key] = 1 + 0.1 * noise
        else:
            scale = 1 / math.sqrt(p[0].numel()) if p.ndim >= 2 else 0.1
            state[key] = noise * (scale * (0.05 if key.startswith("proj_out") else 1.0))  # tame_output
    del pool
    cfg = replace(_config(), hidden_size=3072, num_heads=24)
    bfl, hub = folder / "flux1-kontext-dev.safetensors", folder / "flux1-kontext-dev-diffusers.safetensors"
    save_file(state, str(hub))
    save_file({k: v.contiguous() for k, v in flux_diffusers_to_original(state, cfg).items()}, str(bfl))
    hf.load_state_dict(state, assign=True)
    del state
    return hf.float().eval(), bfl, hub


@pytest.mark.slow
def test_real_width_kontext_files_match_flux_kontext_pipeline(encoders: Encoders, tmp_path: Path) -> None:
    """The Comfy-layout file, read through detection and the loader, edits the picture diffusers'
    FluxKontextPipeline edits with the same weights; the diffusers-layout file loads into the
    same network, tensor for tensor (one copy of the network at a time)."""
    ref = _picture(tmp_path / "photo.png", 120, 72)
    hf, bfl, hub = _real_width_files(tmp_path)
    rule = replace(REFERENCES["kontext"], sizes=SMALL)  # type: ignore[type-var]
    (picture,) = read_references((ref,), FAMILY)
    scaled = scaled_reference(picture, rule, 8)[0]
    shown = Image.fromarray((scaled.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy())
    theirs = _theirs(_kontext_pipeline(encoders, hf), shown, _settings((ref,), STEPS_WIDE))
    hf.to_empty(device="meta")
    del hf
    gc.collect()

    loaded = load_diffusion_model(bfl)
    assert (loaded.family, loaded.layout) == (FAMILY, "original")
    assert loaded.module.config.hidden_size == 3072  # type: ignore[union-attr]
    nets = Networks(FAMILY, loaded.module, encoders.texts, encoders.vae)
    ours = _edit(nets, encoders.our_t5_tok, ref, STEPS_WIDE)[0]
    del loaded, nets
    gc.collect()
    err = float(np.abs(ours - theirs).max())
    print(f"real-width flux kontext: max |ours - diffusers| = {err * 255:.4f}/255")
    assert theirs.shape == (1, 64, 96, 3) and float(theirs.std()) > 0.05
    assert err * 255 < 3

    from_hub = load_diffusion_model(hub)
    assert (from_hub.family, from_hub.layout) == (FAMILY, "diffusers")
    with safe_open(str(bfl), "pt") as f:
        got = from_hub.module.state_dict()
        assert set(got) == set(f.keys())
        assert all(torch.equal(got[k], f.get_tensor(k)) for k in f.keys())  # noqa: SIM118 (safe_open has no __iter__)


def test_several_references_are_placed_by_comfyuis_offset_method() -> None:
    """ComfyUI's ``_forward`` with its default "offset" method: a first 8 x 12 reference at (0, 0),
    a second 10 x 6 one below it (18 > 18 is false: rows), offsets halved into tokens."""
    a, b = torch.zeros(1, 16, 8, 12), torch.ones(1, 16, 10, 6)
    tokens, ids = reference_tokens((a, b), 1, torch.float32)
    assert tokens.shape == (1, 4 * 6 + 5 * 3, 64)
    want = torch.cat((make_img_ids(1, 8, 12, index=1), make_img_ids(1, 10, 6, index=1, offset=(4, 0))), dim=1)
    assert torch.equal(ids, want)
    tall = reference_tokens((a, torch.ones(1, 16, 30, 4)), 1, torch.float32)[1]
    assert float(tall[0, -1, 2]) == 6 + 1  # 30 + 8 > 4 + 12: beside the first, from column 12 / 2


def test_a_kontext_file_is_told_from_flux_dev_by_its_name(tmp_path: Path) -> None:
    state = {
        k: v.to(torch.bfloat16)
        for k, v in Flux(_config(), device="meta").to_empty(device="cpu").state_dict().items()
    }
    for name, family in (
        ("flux1-kontext-dev.safetensors", "flux-kontext"),
        ("flux1-dev.safetensors", "flux-dev"),
    ):
        path = tmp_path / name
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
        info = inspect_for_loading(path)[1]
        assert (info.kind, info.family) == ("diffusion_model", family)
