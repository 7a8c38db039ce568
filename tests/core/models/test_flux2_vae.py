"""The FLUX.2 VAE against diffusers' ``AutoencoderKLFlux2`` and the latent handling of its
``Flux2KleinPipeline`` (test-only references), at the released widths (128, 256, 512, 512; two
resnets a level; 32 latent channels; random weights and batch-norm statistics), fp32, a 64 x 48
picture: encode (posterior mean, 2x2 patches, normalised) and decode (the inverse, then the
decoder) through the codec the FLUX.2 records name. Files: ComfyUI's original layout
(``flux2-vae.safetensors``) and diffusers' detect as ``vae-flux2`` and load through the public
loader to the same module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.catalog import codec_for, codec_of
from core.files.writer import write_safetensors
from core.loading.loader import inspect_for_loading, load_vae
from core.models.flux2_vae import Flux2VAE, patchify, unpatchify
from tests.core.generate.reference_flux2 import flux2_vae_reference, vae_from

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Flux2VAE]:
    hf = flux2_vae_reference(seed=7)
    return hf, vae_from(hf)


def _bn(hf: Any) -> tuple[torch.Tensor, torch.Tensor]:
    mean = hf.bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(hf.bn.running_var.view(1, -1, 1, 1) + hf.config.batch_norm_eps)
    return mean, std


def _close(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    err, top = float((got - want).abs().max()), float(want.abs().max())
    print(f"{name}: max |ours - diffusers| = {err:.1e} (|out| <= {top:.2f})")
    assert got.shape == want.shape and top > 0.05 and err < 1e-4 * top


def test_encode_and_decode_match_diffusers(pair: tuple[Any, Flux2VAE]) -> None:
    from diffusers import Flux2KleinPipeline

    hf, ours = pair
    codec = codec_for("flux2-klein-4b")
    assert codec_of(ours) is codec and (codec.downscale(ours), codec.channels(ours)) == (16, 128)
    pixels = torch.rand(1, 3, 64, 48, generator=torch.Generator().manual_seed(8)) * 2 - 1
    mean, std = _bn(hf)
    with torch.no_grad():
        latent = codec.encode(ours, pixels)
        want = (Flux2KleinPipeline._patchify_latents(hf.encode(pixels).latent_dist.mode()) - mean) / std
        _close(latent, want, "encode")
        assert latent.shape == (1, 128, 4, 3)
        z = torch.randn(1, 128, 4, 3, generator=torch.Generator().manual_seed(9))
        theirs = hf.decode(Flux2KleinPipeline._unpatchify_latents(z * std + mean)).sample
        _close(codec.decode(ours, z), theirs, "decode")
        tiled = codec.decode_tiled(ours, z)
        assert torch.allclose(tiled, codec.decode(ours, z), atol=1e-5)  # one tile: the same decode


def test_patches_are_diffusers_patches() -> None:
    from diffusers import Flux2KleinPipeline

    z = torch.randn(2, 32, 6, 10)
    assert torch.equal(patchify(z), Flux2KleinPipeline._patchify_latents(z))
    assert torch.equal(unpatchify(patchify(z)), z)


@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_a_saved_file_detects_and_loads(tmp_path: Path, pair: tuple[Any, Flux2VAE], layout: str) -> None:
    hf, ours = pair
    state = dict(ours.state_dict()) if layout == "original" else dict(hf.state_dict())
    path = write_safetensors(tmp_path / "flux2-vae.safetensors", state)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family, det.components[0].layout) == ("vae", "vae-flux2", layout)
    loaded = load_vae(path)
    assert isinstance(loaded.module, Flux2VAE) and loaded.family == "vae-flux2"
    z = torch.randn(1, 128, 2, 2, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        assert torch.equal(loaded.module.decode_latent(z), ours.decode_latent(z))
