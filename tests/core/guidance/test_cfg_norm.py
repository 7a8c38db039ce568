"""CFGNorm, as ComfyUI's node computes it by default (post-CFG): at each latent position the
combined estimate is scaled down to the positive estimate's norm over the channels, never up, then
by the strength (ComfyUI's Qwen-Image-Edit templates: strength 1)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from core.errors import LoadoutError
from core.guidance import parse_patch
from core.guidance.cfg_level import CfgNorm
from core.models.patches import NetworkPatches
from core.sampling.patches import CfgCall


def _call(cond: Tensor, uncond: Tensor, scale: float) -> CfgCall:
    def again(patches: NetworkPatches, *, x: Tensor | None = None, negative: bool = False) -> Tensor | None:
        raise AssertionError("CFGNorm runs the network no more")

    return CfgCall(torch.zeros_like(cond), torch.tensor([0.5]), cond, uncond, scale, again)


def test_the_guided_estimate_is_scaled_down_to_the_positive_norm_per_position() -> None:
    # two channels, two positions: at the first the guided estimate is longer than the positive
    # (3-4-5 against 0.6-0.8-1), at the second shorter (kept as it is)
    cond = torch.tensor([[[[0.6, 3.0]], [[0.8, 4.0]]]])  # [1, 2, 1, 2]
    uncond = torch.tensor([[[[0.0, 2.0]], [[0.0, 4.0]]]])
    call = _call(cond, uncond, 5.0)
    guided = call.cfg()  # position 0: (3, 4), norm 5; position 1: (7, 4), norm 8.06 > 5
    (post,) = CfgNorm().model_patches(None).post_cfg  # type: ignore[arg-type]
    out = post(call, guided)
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([0.6, 0.8]))  # down to |cond| = 1
    ratio = 5.0 / float(torch.tensor([7.0, 4.0]).norm())
    torch.testing.assert_close(out[0, :, 0, 1], torch.tensor([7.0, 4.0]) * ratio)
    shorter = _call(cond, cond, 1.0)
    torch.testing.assert_close(post(shorter, shorter.cfg() * 0.5), cond * 0.5)  # never scaled up
    (half,) = CfgNorm(strength=0.5).model_patches(None).post_cfg  # type: ignore[arg-type]
    torch.testing.assert_close(half(call, guided), out * 0.5)


def test_cfg_norm_by_name_and_its_limit() -> None:
    assert parse_patch("cfg_norm") == CfgNorm(strength=1.0)
    assert parse_patch("cfg_norm:0.8") == CfgNorm(strength=0.8)
    with pytest.raises(LoadoutError, match="from 0 to 1"):
        parse_patch("cfg_norm:strength=2")
