"""The diffusers pipelines the IP-Adapter picture tests compare against, around a UNet pair each
test chooses: the tokenizers, CLIP text encoders (768-wide CLIP-L; SDXL also 1280-wide OpenCLIP-G
with its projection) and a tiny VAE, in diffusers and in Loadout with the same weights (fixed
seeds: every test gets the same text encoders and VAE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.generate.pipeline import Networks
from core.models.unet import UNetModel
from core.models.vae import SD1_LATENT, SDXL_LATENT
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import clip_pair, clip_tokenizer, discrete_scheduler, vae_pair


def sd15_pipeline(root: Path, hf_unet: Any, unet: UNetModel) -> tuple[Any, Networks]:
    """diffusers' StableDiffusionPipeline (euler) and Loadout's SD1.5 networks around the UNet pair."""
    import diffusers

    tokenizer = clip_tokenizer(root / "clip_l", pad_with_end=True)
    hf_clip, clip = clip_pair(768, act="quick_gelu", projection=None, seed=1)
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=3)
    pipe = diffusers.StableDiffusionPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), safety_checker=None, feature_extractor=None,
        image_encoder=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sd1", unet, TextEncoders(clip_l=clip), vae)


def sdxl_pipeline(root: Path, hf_unet: Any, unet: UNetModel) -> tuple[Any, Networks]:
    """diffusers' StableDiffusionXLPipeline (euler, an empty prompt not zeroed, as ComfyUI) and
    Loadout's SDXL networks around the UNet pair."""
    import diffusers

    tok_l = clip_tokenizer(root / "clip_l", pad_with_end=True)
    tok_g = clip_tokenizer(root / "clip_g", pad_with_end=False)
    hf_l, clip_l = clip_pair(768, act="quick_gelu", projection=None, seed=1)
    hf_g, clip_g = clip_pair(1280, act="gelu", projection=1280, seed=2)
    hf_vae, vae = vae_pair(4, SDXL_LATENT, seed=4)
    pipe = diffusers.StableDiffusionXLPipeline(
        vae=hf_vae, text_encoder=hf_l, text_encoder_2=hf_g, tokenizer=tok_l, tokenizer_2=tok_g, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), force_zeros_for_empty_prompt=False, add_watermarker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sdxl", unet, TextEncoders(clip_l=clip_l, clip_g=clip_g), vae)
