"""Inpainting with a noise mask (SetLatentNoiseMask -> KSampler) on every DiT family's network:
16-channel latents (SD3, Flux, Chroma, Z-Image, Lumina 2, Qwen-Image), PixArt's 4, FLUX.2's 128 at
16 pixels per latent, networks that pack 2x2 patches and ones that do not. Tiny real networks
(random weights), the family's own sampling and latent format, stand-in prompts from the network's
package; the mask is given at the picture's size, as the pipeline gives it.

Each picture: the latent outside the mask is the starting picture's (ComfyUI's KSamplerX0Inpaint
returns it at every step), the latent under it is repainted and depends on the seed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from core.archs.catalog import net_of
from core.archs.conditioning import Conditioning
from core.detect.catalog import diffusion_spec
from core.sampling import SamplingRequest, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from tests.fixtures.tiny_models import TINY_CHROMA, TINY_FLUX, TINY_MMDIT, TINY_PIXART, Tiny

pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread")]

PICTURE = 64  # pixels a side


def _tiny(t: Tiny) -> Callable[[], nn.Module]:
    return lambda: t.reference()


def _z_image() -> nn.Module:
    from tests.core.generate.reference_nextdit import ours_from, z_image_reference

    return ours_from(z_image_reference(dim=256, heads=2, layers=1, refiners=1, cap=64, seed=3))


def _lumina2() -> nn.Module:
    from tests.core.generate.reference_nextdit import lumina2_reference, ours_from

    return ours_from(lumina2_reference(dim=192, heads=2, kv_heads=1, layers=1, refiners=1, cap=64, seed=4))


def _qwen_image() -> nn.Module:
    from tests.core.generate.reference_qwen_image import ours_from, qwen_image_reference

    return ours_from(qwen_image_reference(dim=256, heads=2, layers=1, seed=5))


def _flux2() -> nn.Module:
    from tests.core.generate.reference_flux2 import flux2_reference, ours_from

    return ours_from(flux2_reference(heads=2, context=64, seed=6))


FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "sd3": _tiny(TINY_MMDIT),
    "flux-dev": _tiny(TINY_FLUX),
    "chroma": _tiny(TINY_CHROMA),
    "pixart-alpha": _tiny(TINY_PIXART),
    "z-image": _z_image,
    "lumina2": _lumina2,
    "qwen-image": _qwen_image,
    "flux2-klein-4b": _flux2,
}


def _inpaint(family: str, dit: nn.Module, picture: Tensor, mask: Tensor, seed: int) -> Tensor:
    spec = diffusion_spec(family)
    assert spec.network is not None
    net = net_of(dit)
    stand = net.stand_in(getattr(dit, "config"), 1, torch.Generator().manual_seed(1))  # noqa: B009
    cond = Conditioning(stand.context, stand.pooled, stand.guidance, stand.mask)  # type: ignore[arg-type]
    request = SamplingRequest(seed, steps=3, cfg=1.0, sampler="euler", scheduler="simple")
    with torch.no_grad():
        return sample(
            NetworkAdapter(dit, convention=spec.network), from_spec(spec.sampling, family),
            latent_format_for(family), picture, cond, None, request, denoise_mask=mask,
        )  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_noise_mask_keeps_the_picture_outside_and_repaints_inside(family: str) -> None:
    dit = FAMILIES[family]()
    fmt = latent_format_for(family)
    stride = net_of(dit).calling.latent_stride
    assert fmt.downscale == stride
    side = PICTURE // stride
    picture = torch.randn(1, fmt.channels, side, side, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(1, 1, PICTURE, PICTURE)
    mask[..., PICTURE // 2 :] = 1.0  # repaint the right half

    a = _inpaint(family, dit, picture, mask, seed=1)
    b = _inpaint(family, dit, picture, mask, seed=2)
    assert a.shape == picture.shape and torch.isfinite(a).all()
    left, right = slice(0, side // 2), slice(side // 2, side)
    for out in (a, b):
        assert torch.allclose(out[..., left], picture[..., left], atol=1e-5)
        assert float((out[..., right] - picture[..., right]).abs().mean()) > 0.05
    assert float((a[..., right] - b[..., right]).abs().mean()) > 1e-3  # the seed repaints
