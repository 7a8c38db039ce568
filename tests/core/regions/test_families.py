"""Regions on the real networks of the UNet and DiT families (tiny configs, seeded weights): each runs
a region's crop of the latent, odd sizes included (ComfyUI's boxes are whole cells, so a 9 x 7 cell
crop is an ordinary one: the UNets match their skip connections, the DiTs pad to their patch), with
the family's conditioning (SDXL's label vector, SD3's and Flux's pooled vector, Flux-dev's distilled
guidance, Z-Image's caption). A region of strength 0 leaves the result exactly as without it (every
crop ran, weighed 0); of strength 1 it changes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

from core.models.nextdit.config import NextDiTConfig
from core.models.nextdit.network import NextDiT
from core.models.patches import NO_PATCHES, NetworkPatches
from core.regions import Box, Region, negative_copies, region_entry
from core.sampling import Conditioning, for_family, latent_format_for
from core.sampling.cfg import CfgDenoiser
from core.sampling.denoiser import ModelDenoiser
from core.sampling.network import NetworkAdapter
from core.sampling.patches import ModelPatches
from tests.fixtures.tiny_models import TINY_FLUX, TINY_MMDIT, TINY_UNET_SD1, TINY_UNET_SDXL, random_state

pytestmark = pytest.mark.usefixtures("one_thread")

LATENT = (12, 14)  # cells
PICTURE = (14 * 8, 12 * 8)


@dataclass(frozen=True)
class Family:
    family: str
    build: Callable[[], nn.Module]
    context: int
    pooled: int | None = None
    guidance: bool = False


def _z_image() -> nn.Module:
    cfg = NextDiTConfig(
        dim=256, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2, ffn_hidden=512, cap_feat_dim=64
    )
    net = NextDiT(cfg, device="meta")
    net.load_state_dict(random_state(net, 40), assign=True, strict=True)
    return net.eval()


FAMILIES = [
    Family("sd1", TINY_UNET_SD1.reference, 768),
    Family("sdxl", TINY_UNET_SDXL.reference, 2048, 2816),
    Family("sd3", TINY_MMDIT.reference, 32, 24),
    Family("flux-dev", TINY_FLUX.reference, 20, 12, guidance=True),
    Family("z-image", _z_image, 64),
]


class Recording:
    def __init__(self, adapter: NetworkAdapter) -> None:
        self.adapter = adapter
        self.shapes: list[tuple[int, ...]] = []

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor:
        self.shapes.append(tuple(x.shape[-2:]))
        return self.adapter(x, timestep, cond, patches)


def _cond(f: Family, seed: int) -> Conditioning:
    g = torch.Generator().manual_seed(seed)
    pooled = None if f.pooled is None else torch.randn(1, f.pooled, generator=g)
    return Conditioning(
        torch.randn(1, 5, f.context, generator=g), pooled, torch.full((1,), 3.5) if f.guidance else None
    )


@pytest.mark.parametrize("f", FAMILIES, ids=[f.family for f in FAMILIES])
def test_a_region_runs_on_its_crop_in_every_family(f: Family) -> None:
    net = Recording(NetworkAdapter(f.build()))
    ms = for_family(f.family)
    channels = latent_format_for(f.family).channels
    x = torch.randn(1, channels, *LATENT, generator=torch.Generator().manual_seed(5)) * 0.8
    sigma = torch.full((1,), float(ms.sigma_max) * 0.6)
    base, negative, region_cond = _cond(f, 1), _cond(f, 2), _cond(f, 3)
    box = Box(2 * 8, 3 * 8, 9 * 8, 7 * 8)  # 9 x 7 cells from column 2, row 3

    def guided(strength: float | None) -> Tensor:
        patches = ModelPatches()
        if strength is not None:
            entry = region_entry(Region("r", box, strength=strength), region_cond, None, PICTURE, LATENT, ms)
            patches = ModelPatches(positive_conds=(entry,), negative_conds=negative_copies((entry,)))
        with torch.inference_mode():
            return CfgDenoiser(ModelDenoiser(net, ms), base, negative, 5.0, patches)(x, sigma)

    plain = guided(None)
    net.shapes.clear()
    assert torch.equal(guided(0.0), plain)
    assert net.shapes == [LATENT, (7, 9)]  # the whole latent, then the crop (each a batch of both prompts)
    changed = guided(1.0)
    assert torch.isfinite(changed).all() and not torch.allclose(changed, plain)
    inside = changed[..., 3:10, 2:11]
    assert torch.equal(changed[..., :, :2], plain[..., :, :2])  # outside the box: as before
    assert not torch.allclose(inside, plain[..., 3:10, 2:11])
