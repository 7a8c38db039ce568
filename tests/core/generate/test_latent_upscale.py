"""LatentUpscaleBy's methods against independent computations: torch's interpolate for the plain
modes (and the rounding of the new size), a per-position slerp written out for bislerp."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from core.errors import LoadoutError
from core.generate.latent_upscale import LATENT_METHODS, bislerp, scaled_size, upscale_by


def _latent(b: int = 2, c: int = 4, h: int = 5, w: int = 7, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("side", "scale", "want"),
    [(64, 2.0, 128), (64, 1.5, 96), (5, 1.5, 8), (7, 1.5, 10), (3, 2.5, 8), (10, 1.25, 12)],
)
def test_the_new_size_is_rounded_half_to_even_as_python_rounds(side: int, scale: float, want: int) -> None:
    # 5 * 1.5 = 7.5 -> 8 (even), 7 * 1.5 = 10.5 -> 10 (even), 3 * 2.5 = 7.5 -> 8, 12.5 -> 12
    assert scaled_size(side, side, scale) == (want, want)


@pytest.mark.parametrize("mode", ["nearest-exact", "bilinear", "area", "bicubic"])
@pytest.mark.parametrize("scale", [2.0, 1.5, 0.75])
def test_plain_modes_are_torch_interpolate_at_the_rounded_size(mode: str, scale: float) -> None:
    x = _latent()
    got = upscale_by(x, scale, mode)
    size = (round(x.shape[2] * scale), round(x.shape[3] * scale))
    want = F.interpolate(x, size=size, mode=mode, align_corners=None)
    assert got.shape == want.shape
    assert torch.equal(got, want)


def _direct_slerp(a: torch.Tensor, b: torch.Tensor, t: float) -> torch.Tensor:
    """One pair of channel vectors, written out in float64."""
    a64, b64 = a.double(), b.double()
    la, lb = a64.norm(), b64.norm()
    ua = a64 / la if la > 0 else torch.zeros_like(a64)
    ub = b64 / lb if lb > 0 else torch.zeros_like(b64)
    cos = float((ua * ub).sum())
    if cos > 1 - 1e-5:
        return a64
    if cos < 1e-5 - 1:
        return a64 * (1 - t) + b64 * t
    omega = math.acos(cos)
    s = math.sin(omega)
    direction = (math.sin((1 - t) * omega) / s) * ua + (math.sin(t * omega) / s) * ub
    return direction * (la * (1 - t) + lb * t)


def _neighbours(old: int, new: int, i: int) -> tuple[int, int, float]:
    """Bilinear sampling with half-pixel centres, clamped at the edges."""
    pos = min(max((i + 0.5) * old / new - 0.5, 0.0), old - 1)
    first = math.floor(pos)
    return first, min(first + 1, old - 1), pos - first


def _direct_bislerp(x: torch.Tensor, width: int, height: int) -> torch.Tensor:
    n, c, h, w = x.shape
    rows = torch.zeros(n, c, h, width, dtype=torch.float64)
    for bi in range(n):
        for y in range(h):
            for i in range(width):
                j0, j1, t = _neighbours(w, width, i)
                rows[bi, :, y, i] = _direct_slerp(x[bi, :, y, j0], x[bi, :, y, j1], t)
    out = torch.zeros(n, c, height, width, dtype=torch.float64)
    for bi in range(n):
        for i in range(height):
            j0, j1, t = _neighbours(h, height, i)
            for xx in range(width):
                out[bi, :, i, xx] = _direct_slerp(rows[bi, :, j0, xx], rows[bi, :, j1, xx], t)
    return out


@pytest.mark.parametrize(("width", "height"), [(14, 10), (11, 8), (4, 3)])
def test_bislerp_matches_a_direct_slerp_of_each_channel_vector(width: int, height: int) -> None:
    x = _latent(h=5, w=7)
    x[0, :, 1, 2] = 0.0  # a zero vector: zero direction
    x[1, :, 3, 4] = -x[1, :, 3, 5]  # opposite neighbours: mixed linearly
    x[1, :, 0, 0] = x[1, :, 0, 1] * 2.0  # same direction: the first kept
    got = bislerp(x, width, height)
    want = _direct_bislerp(x, width, height)
    assert got.shape == (2, 4, height, width)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)


def test_bislerp_differs_from_bilinear_and_keeps_the_input_dtype() -> None:
    x = _latent()
    assert not torch.allclose(upscale_by(x, 2.0, "bislerp"), upscale_by(x, 2.0, "bilinear"), atol=1e-3)
    assert upscale_by(x.half(), 2.0, "bislerp").dtype == torch.float16


def test_every_method_gives_the_scaled_shape() -> None:
    x = _latent(h=8, w=8)
    for method in LATENT_METHODS:
        assert upscale_by(x, 1.5, method).shape == (2, 4, 12, 12)


def test_an_unknown_method_is_refused_by_name() -> None:
    with pytest.raises(LoadoutError, match="lanczos"):
        upscale_by(_latent(), 2.0, "lanczos")
