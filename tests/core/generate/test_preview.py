"""The live preview's latent -> RGB map, fitted from the decoder itself."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.generate.preview import fit_latent_preview, fit_linear_preview
from core.models.vae import AutoencoderKL, VAEConfig


def test_a_linear_decoder_is_recovered_exactly() -> None:
    for channels in (4, 16):
        g = torch.Generator().manual_seed(channels)
        matrix, bias = torch.randn(channels, 3, generator=g), torch.randn(3, generator=g)

        def decode(z: torch.Tensor, m: torch.Tensor = matrix, b: torch.Tensor = bias) -> torch.Tensor:
            rgb = torch.einsum("nchw,cr->nrhw", z, m) + b[:, None, None]
            return F.interpolate(rgb, scale_factor=8, mode="nearest")  # each latent pixel -> 8x8 block

        preview = fit_linear_preview(decode, channels, 8)
        assert torch.allclose(preview.weight, matrix, atol=1e-4)
        assert torch.allclose(preview.bias, bias, atol=1e-4)
        z = torch.randn(2, channels, 5, 7, generator=g) * 0.1
        rgb = preview.rgb(z)
        assert rgb.shape == (5, 7, 3) and rgb.dtype.name == "uint8"
        want = ((torch.einsum("chw,cr->hwr", z[0], matrix) + bias).clamp(-1, 1) + 1) * 127.5
        assert (torch.from_numpy(rgb).float() - want).abs().max() <= 1.0


def test_fits_a_real_vae_module_of_either_latent_width() -> None:
    for channels in (4, 16):
        cfg = VAEConfig(
            base_channels=32, channel_mult=(1, 2), num_res_blocks=1, latent_channels=channels, norm_groups=8
        )
        torch.manual_seed(0)
        vae = AutoencoderKL(cfg, device="cpu")
        for p in vae.parameters():
            torch.nn.init.normal_(p, std=0.05)
        preview = fit_latent_preview(vae)
        assert preview.weight.shape == (channels, 3) and torch.isfinite(preview.weight).all()
