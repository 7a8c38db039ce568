"""A tiny FLUX.1 [dev] pair for the Redux parity test: diffusers' ``FluxPipeline`` (random weights,
real 128-wide heads, one double and one single block, narrow CLIP-L and T5) and the same networks in
Loadout's layout, as the other Flux parity tests build them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.generate.pipeline import Networks
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.models.flux import Flux, FluxConfig
from core.models.vae import FLUX_LATENT
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import (
    clip_pair,
    clip_tokenizer,
    randomize,
    t5_pair,
    t5_tokenizers,
    tame_output,
    vae_pair,
)

L_WIDTH, T5_WIDTH = 32, 24


def flux_pair(folder: Path) -> tuple[Any, Networks, Any, int]:
    """(diffusers' pipeline, our networks, our T5 tokenizer, the T5 context width)."""
    import diffusers

    tok_l = clip_tokenizer(folder / "clip_l", pad_with_end=True)
    our_t5_tok, hf_t5_tok = t5_tokenizers(folder / "t5")
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=41)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=42)
    hf_flux = diffusers.FluxTransformer2DModel(
        patch_size=1, in_channels=64, out_channels=64, num_layers=1, num_single_layers=1,
        attention_head_dim=128, num_attention_heads=2, joint_attention_dim=T5_WIDTH,
        pooled_projection_dim=L_WIDTH, guidance_embeds=True, axes_dims_rope=(16, 56, 56),
    )  # fmt: skip
    randomize(hf_flux, 43)
    tame_output(hf_flux.proj_out)
    config = FluxConfig(
        in_channels=64, out_channels=64, vec_in_dim=L_WIDTH, context_in_dim=T5_WIDTH, hidden_size=256,
        num_heads=2, depth=1, depth_single_blocks=1, axes_dim=(16, 56, 56), guidance_embed=True,
    )  # fmt: skip
    flux = Flux(config).eval()
    flux.load_state_dict(flux_diffusers_to_original(hf_flux.state_dict(), config), strict=True)
    hf_vae, vae = vae_pair(16, FLUX_LATENT, seed=44)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = diffusers.FluxPipeline(
        scheduler=scheduler, vae=hf_vae, text_encoder=hf_l, tokenizer=tok_l, text_encoder_2=hf_t5,
        tokenizer_2=hf_t5_tok, transformer=hf_flux,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    nets = Networks("flux-dev", flux, TextEncoders(clip_l=clip_l, t5=t5), vae)
    return pipe, nets, our_t5_tok, T5_WIDTH
