"""SD3's three text encoders and VAE, tiny and random, in diffusers' form and ours, with their
tokenizers (the T5 vocabulary a real SentencePiece model trained here): what the SD3 parity tests
share. diffusers is set up the way ComfyUI computes (see ``test_parity_sd3``): CLIP-L's projection
is the identity in diffusers' copy (ComfyUI's SD3 pools CLIP-L unprojected), the T5 is 4096 wide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.models.vae import SD3_LATENT
from core.text.conditioning import SD3_CONTEXT_WIDTH, TextEncoders
from tests.core.generate.reference import clip_pair, clip_tokenizer, t5_pair, t5_tokenizers, vae_pair

L_WIDTH, G_WIDTH, G_PROJECTION = 32, 48, 40
POOLED = L_WIDTH + G_PROJECTION


@dataclass(frozen=True)
class SD3Parts:
    diffusers: dict[str, Any]  # the StableDiffusion3Pipeline arguments for text and VAE
    encoders: TextEncoders
    vae: Any
    t5_tokenizer: Any


def sd3_parts(tmp_path_factory: Any) -> SD3Parts:
    tok_l = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    tok_g = clip_tokenizer(tmp_path_factory.mktemp("clip_g"), pad_with_end=False)
    our_t5_tok, hf_t5_tok = t5_tokenizers(tmp_path_factory.mktemp("t5"))
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=L_WIDTH, seed=21)
    assert float((clip_l.state_dict()["text_projection.weight"] - torch.eye(L_WIDTH)).abs().max()) > 0.1
    with torch.no_grad():  # diffusers projects CLIP-L's pooled output, ComfyUI's SD3 does not
        hf_l.text_projection.weight.copy_(torch.eye(L_WIDTH))
    hf_g, clip_g = clip_pair(G_WIDTH, act="gelu", projection=G_PROJECTION, seed=22)
    hf_t5, t5 = t5_pair(SD3_CONTEXT_WIDTH, vocab=len(hf_t5_tok), seed=23)
    hf_vae, vae = vae_pair(16, SD3_LATENT, seed=25)
    hf = {
        "vae": hf_vae, "text_encoder": hf_l, "tokenizer": tok_l, "text_encoder_2": hf_g, "tokenizer_2": tok_g,
        "text_encoder_3": hf_t5, "tokenizer_3": hf_t5_tok,
    }  # fmt: skip
    return SD3Parts(hf, TextEncoders(clip_l=clip_l, clip_g=clip_g, t5=t5), vae, our_t5_tok)
