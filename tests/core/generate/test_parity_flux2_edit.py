"""FLUX.2 klein multi-reference editing, the whole picture, against diffusers' ``Flux2KleinPipeline``
with ``image=`` (test-only reference), set up as ComfyUI computes.

Ours is a Loadout generation's plan: the reference pictures read from PNG files, scaled by FLUX.2's
rule, VAE-encoded and attached to the prompt's conditioning by the reference pass
(``ReferenceLatent``), the network taking them as extra tokens at time indices 10 and 20, klein's
prompt encoding, ComfyUI's sampling (flow shift 2.02, ``euler``, ``simple``, CFG 1) and the
codec's decode. diffusers gets what ComfyUI computes: the prompt's hidden states from
transformers' Qwen3 (as ``test_parity_flux2.py``), ComfyUI's sigmas and CPU noise, and the
pictures as ComfyUI scaled them (diffusers itself only shrinks a picture over one megapixel;
docs/families.md). Random weights: the transformer 4 heads of 128, one double and one single
block; a narrow FLUX.2 VAE; a narrow Qwen3 of klein's depth.

The rule is FLUX.2's (``ImageScaleToTotalPixels``, Lanczos) at 128 x 128 pixels of area instead of
a megapixel: two 1 MP references are 8,192 tokens, minutes of CPU for two tiny blocks; the
megapixel itself is ComfyUI's arithmetic, proven in ``test_references.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from core.archs.catalog import REFERENCES
from core.detect.catalog import diffusion_spec
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.png import to_uint8_rgb
from core.generate.references import ReferencePass, read_references, scaled_reference
from core.generate.request import ImageSettings, Sampling
from core.sampling import ksampler_sigmas
from core.sampling.model_sampling import from_spec
from core.text.conditioning import TextEncoders
from tests.core.generate.reference_flux2 import flux2_reference, flux2_vae_reference, ours_from, vae_from
from tests.core.generate.test_parity_flux2 import PROMPT, _embeds, _encoder

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

SEED, STEPS, SIZE, FAMILY = 11, 3, 64, "flux2-klein-4b"


def _smooth(path: Path, w: int, h: int, seed: int) -> Path:
    """A smooth random picture (upscaled noise), so Lanczos has something to do but no ringing
    decides the test."""
    small = np.random.default_rng(seed).integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(path)
    return path


def _ours(text: Any, dit: Any, vae: Any, refs: tuple[Path, ...]) -> tuple[np.ndarray, list[Image.Image]]:
    nets = Networks(FAMILY, dit, TextEncoders({"qwen3-4b": text}), vae)
    pipeline = Pipeline(nets, Compute())
    sampling = Sampling(seed=SEED, steps=STEPS, cfg=1.0, sampler="euler", scheduler="simple")
    settings = ImageSettings(PROMPT, sampling=sampling, width=SIZE, height=SIZE, references=refs)
    pictures = read_references(refs, FAMILY)
    rule = replace(REFERENCES["flux2"], area=128 * 128)  # type: ignore[type-var]
    pixels, _, _ = pipeline.run(settings, Hooks(), None, [ReferencePass(pictures, rule)])
    # what ComfyUI's ImageScaleToTotalPixels made of each picture, for diffusers
    scaled = [scaled_reference(p, rule, 16) for p in pictures]
    shown = [Image.fromarray(to_uint8_rgb(s[0] * 2 - 1)) for s in scaled]
    return pixels[0].float().permute(1, 2, 0).add(1).div(2).clamp(0, 1).numpy(), shown


def _theirs(hf_dit: Any, hf_vae: Any, embeds: torch.Tensor, images: list[Image.Image]) -> np.ndarray:
    spec = diffusion_spec(FAMILY)
    sigmas = ksampler_sigmas(from_spec(spec.sampling, FAMILY), "simple", "euler", STEPS)
    noise = torch.randn(1, 128, SIZE // 16, SIZE // 16, generator=torch.Generator("cpu").manual_seed(SEED))
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.Flux2KleinPipeline(
        scheduler=scheduler, vae=hf_vae, text_encoder=None, tokenizer=None, transformer=hf_dit,
        is_distilled=True,
    )  # fmt: skip
    with torch.no_grad():
        out = pipe(
            image=images, prompt_embeds=embeds, sigmas=[float(s) for s in sigmas[:-1]],
            num_inference_steps=STEPS, height=SIZE, width=SIZE, guidance_scale=1.0, latents=noise,
            output_type="np",
        ).images  # fmt: skip
    return np.asarray(out[0], dtype=np.float32)


def test_klein_edit_with_two_references_matches_flux2_klein_pipeline(tmp_path: Path) -> None:
    # 64 x 32 and 96 x 96 scale to 181 x 91 (cropped to 176 x 80 for the VAE) and 128 x 128
    refs = (_smooth(tmp_path / "a.png", 64, 32, 1), _smooth(tmp_path / "b.png", 96, 96, 2))
    hf_text, ours_text = _encoder()
    hf_dit = flux2_reference(heads=4, context=3 * 64, seed=71)
    hf_vae = flux2_vae_reference(base=16, seed=72)
    ours, shown = _ours(ours_text, ours_from(hf_dit), vae_from(hf_vae), refs)
    assert [im.size for im in shown] == [(176, 80), (128, 128)]
    theirs = _theirs(hf_dit, hf_vae, _embeds(hf_text), shown)
    without, _ = _ours(ours_text, ours_from(hf_dit), vae_from(hf_vae), ())
    diff = np.abs(ours - theirs) * 255
    moved = np.abs(ours - without) * 255
    print(
        f"flux2 klein edit: max |ours - diffusers| = {diff.max():.4f}/255, mean {diff.mean():.4f}; "
        f"the references move the picture by up to {moved.max():.3f}/255 (mean {moved.mean():.3f})"
    )
    assert ours.shape == theirs.shape == (SIZE, SIZE, 3)
    assert diff.max() <= 3 and ours.std() * 255 > 5
    # the references change the picture far more than the two libraries differ (dropped: it fails)
    assert moved.mean() > 20 * diff.mean()
