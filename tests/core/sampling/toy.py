"""The deterministic toy diffusion network the golden values were produced with, and helpers to
compare a tensor with a recorded summary.

Golden files (``tests/fixtures/golden/comfy_*.json``) were produced by running ComfyUI's own
``comfy.sample.sample`` / ``KSampler`` / ``model_sampling`` / ``k_diffusion.sampling`` code at
commit a125cd84b054a57729b5eecab930ca9408719832 (v0.3.64, 2025-10-11) on CPU in float32, with a
real ``comfy.model_base.BaseModel`` of each family's config whose diffusion network was replaced
by :class:`ToyNet`, conditionings from :func:`toy_conditioning`, through ``ModelPatcher`` and
``CFGGuider`` exactly as the KSampler node runs. Only the numbers are kept: each output tensor is
recorded by its sum, absolute sum, sum of squares (float64) and 8 values at evenly spaced flat
indices. No ComfyUI code is part of this repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling import Conditioning, LatentFormat, ModelSampling, for_family, latent_format_for

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden"

#: family name used in the goldens -> (Loadout family id, v-prediction, timestep scale, channels)
FAMILIES: dict[str, tuple[str, bool, float, int]] = {
    "sd1": ("sd1", False, 1 / 1000, 4),
    "sd2v": ("sd2", True, 1 / 1000, 4),
    "sdxl": ("sdxl", False, 1 / 1000, 4),
    "sd3": ("sd3", False, 1 / 1000, 16),
    "flux-dev": ("flux-dev", False, 1.0, 16),
    "flux-schnell": ("flux-schnell", False, 1.0, 16),
}


def load_golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


class ToyNet:
    """``out = 0.9 x + 0.2 sin(3x) + 0.05 t' x + mean(context) * w[channel]``: non-linear in x,
    depends on the timestep and on the prompt, so every sampler/scheduler/CFG path shows."""

    def __init__(self, t_scale: float, channels: int) -> None:
        self.t_scale = t_scale
        self.w = torch.linspace(-0.5, 0.5, channels)
        self.calls: list[tuple[int, Tensor]] = []  # (batch, timesteps) of every forward

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor:
        self.calls.append((x.shape[0], timestep.clone()))
        tt = (timestep.float() * self.t_scale).view(-1, 1, 1, 1)
        bias = cond.context.mean(dim=(1, 2)).view(-1, 1, 1, 1) * self.w.view(1, -1, 1, 1)
        return 0.9 * x + 0.2 * torch.sin(3.0 * x) + 0.05 * tt * x + bias


def toy_conditioning(batch: int) -> tuple[Conditioning, Conditioning]:
    pos = torch.randn(batch, 3, 8, generator=torch.Generator().manual_seed(1))
    neg = torch.randn(batch, 3, 8, generator=torch.Generator().manual_seed(2))
    return Conditioning(pos), Conditioning(neg)


def family_setup(name: str) -> tuple[ModelSampling, LatentFormat, ToyNet]:
    family, vpred, t_scale, channels = FAMILIES[name]
    return for_family(family, v_prediction=vpred), latent_format_for(family), ToyNet(t_scale, channels)


def image_latent(batch: int, channels: int, seed: int = 123) -> Tensor:
    """The non-zero "VAE" latent of the img2img goldens."""
    return torch.randn(batch, channels, 8, 8, generator=torch.Generator().manual_seed(seed)) * 0.8 + 0.1


def assert_matches(actual: Tensor, golden: dict[str, Any], rel: float = 1e-5) -> None:
    t = actual.detach().double().reshape(-1)
    assert list(t.shape) == golden["shape"]
    scale = max(float(golden["abs_sum"]) / t.numel(), 1e-12)  # mean magnitude
    got = t[torch.tensor(golden["idx"])].tolist()
    for g, w in zip(got, golden["values"], strict=True):
        assert abs(g - w) <= rel * max(abs(w), scale), (got, golden["values"])
    assert abs(t.sum().item() - golden["sum"]) <= rel * golden["abs_sum"] + 1e-9
    assert abs(t.abs().sum().item() - golden["abs_sum"]) <= rel * golden["abs_sum"] + 1e-9
    assert abs((t * t).sum().item() - golden["sq_sum"]) <= 2 * rel * golden["sq_sum"] + 1e-9
