"""The noise mask (SetLatentNoiseMask -> KSampler) and KSamplerAdvanced's hand-off, against the
formulas of ComfyUI's KSamplerX0Inpaint and common_ksampler written out step by step here."""

from __future__ import annotations

import torch
from torch import Tensor

from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling import (
    Conditioning,
    SamplingRequest,
    for_family,
    initial_noise,
    ksampler_sigmas,
    latent_format_for,
    sample,
)
from core.sampling.masked import latent_mask

MS = for_family("sd1")
FMT = latent_format_for("sd1")


def toy(x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES) -> Tensor:
    """A smooth deterministic 'network' (eps prediction) that depends on x, t and the prompt."""
    return 0.3 * x + torch.sin(x * 1.7) * 0.2 + cond.context.mean() * 0.1 + t.reshape(-1, 1, 1, 1) * 1e-4


def _euler_reference(latent: Tensor, mask: Tensor, seed: int, steps: int, denoise: float) -> Tensor:
    cond = Conditioning(torch.full((1, 4, 8), 0.5))
    sigmas = ksampler_sigmas(MS, "normal", "euler", steps, denoise)
    noise = initial_noise(latent.shape, seed)
    start = FMT.process_in(latent)
    x = MS.noise_scaling(sigmas[0], noise, start, False)
    keep = 1.0 - mask
    for i in range(len(sigmas) - 1):
        s = sigmas[i : i + 1]
        xin = x * mask + (start + noise * s) * keep
        eps = toy(MS.calculate_input(s, xin), MS.timestep(s).float(), cond)
        denoised = (xin - eps * s) * mask + start * keep
        x = x + (x - denoised) / s * (sigmas[i + 1] - s)
    return FMT.process_out(x)


def test_noise_mask_keeps_the_unmasked_latent_as_comfyui() -> None:
    g = torch.Generator().manual_seed(1)
    latent = torch.randn(1, 4, 6, 6, generator=g)
    mask = (torch.rand(1, 1, 6, 6, generator=g) > 0.5).float()
    cond = Conditioning(torch.full((1, 4, 8), 0.5))
    req = SamplingRequest(seed=5, steps=4, cfg=1.0, denoise=0.75)
    out = sample(toy, MS, FMT, latent, cond, None, req, denoise_mask=mask)
    want = _euler_reference(latent, latent_mask(mask, latent.shape), 5, 4, 0.75)
    assert torch.allclose(out, want, atol=1e-5, rtol=1e-5)
    kept = mask.expand_as(latent) == 0
    assert torch.allclose(out[kept], latent[kept], atol=1e-5)  # the unmasked latent comes back
    plain = sample(toy, MS, FMT, latent, cond, None, req)
    assert not torch.allclose(out, plain)


def test_a_mask_is_resized_bilinear_to_the_latent_and_repeated() -> None:
    m = torch.zeros(16, 16)
    m[:, 8:] = 1
    small = latent_mask(m, (2, 4, 4, 4))
    assert small.shape == (2, 4, 4, 4)
    assert torch.equal(
        small[0, 0], torch.nn.functional.interpolate(m[None, None], size=(4, 4), mode="bilinear")[0, 0]
    )


def test_base_to_switch_then_refiner_without_noise_equals_one_run() -> None:
    """KSamplerAdvanced with leftover noise, then add_noise disabled from the switch step: with the
    same model both halves make exactly the one full run."""
    latent = torch.zeros(1, 4, 6, 6)
    cond = Conditioning(torch.full((1, 4, 8), 0.5))
    req = SamplingRequest(seed=9, steps=6, cfg=1.0)
    full = sample(toy, MS, FMT, latent, cond, None, req)
    sigmas = ksampler_sigmas(MS, "normal", "euler", 6)
    first = sample(toy, MS, FMT, latent, cond, None, req, sigmas=sigmas[: 4 + 1])
    second = sample(toy, MS, FMT, first, cond, None, req, sigmas=sigmas[4:], add_noise=False)
    assert torch.allclose(second, full, atol=1e-5)


def test_a_mask_batch_is_repeated_or_cut_to_the_latent_batch() -> None:
    two = torch.stack([torch.zeros(8, 8), torch.ones(8, 8)])
    assert latent_mask(two, (3, 4, 4, 4))[:, 0, 0, 0].tolist() == [0.0, 1.0, 0.0]
    assert latent_mask(two, (1, 4, 4, 4)).shape == (1, 4, 4, 4)
