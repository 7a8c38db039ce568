"""Fixtures the generate tests share: the FLUX.1 prompt encoders' and VAE's files as artists have
them (CLIP-L at 768 with its whole vocabulary, T5-XXL at 4096, a Flux-format VAE, a T5 tokenizer
trained here), written once a session for every FLUX.1 CLI test (Fill, Kontext)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import save_file


@pytest.fixture(scope="session")
def flux_encoder_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``clip``, ``t5``, ``vae`` files and the ``tokenizer`` folder (LOADOUT_T5_TOKENIZER)."""
    from app.demo import TINY_CLIP
    from core.loading.architectures import CLIP
    from core.models.vae import FLUX_LATENT
    from tests.core.generate.reference import t5_tokenizers, vae_pair
    from tests.fixtures.tiny_models import TINY_T5, Tiny

    root = tmp_path_factory.mktemp("flux_encoders")
    out = {
        "clip": root / "clip_l.safetensors",
        "t5": root / "t5xxl_fp16.safetensors",
        "vae": root / "ae.safetensors",
        "tokenizer": root / "t5_tokenizer",
    }
    clip = Tiny("clip-l-full-vocabulary", CLIP, "clip-l", TINY_CLIP, seed=22, layout="transformers")
    save_file(clip.file_state(), str(out["clip"]))
    save_file(TINY_T5.file_state(), str(out["t5"]))
    _, vae = vae_pair(16, FLUX_LATENT, seed=23)
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(out["vae"]))
    t5_tokenizers(out["tokenizer"])
    return out
