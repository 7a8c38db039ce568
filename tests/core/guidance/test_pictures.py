"""Each network-level guidance patch on the tiny SD1- and SDXL-shaped UNets (and SLG on the tiny
SD3 MMDiT) through the real sampler: the patch changes the picture, at its neutral parameters the
picture is the one without it; several patches compose; a network without the patch's point
refuses it in words."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

from core.errors import LoadoutError
from core.generate.latent_upscale import resize
from core.guidance import GuidanceContext, GuidancePatch, parse_patch
from core.guidance.perturbed import Pag, Slg
from core.guidance.sag import Sag
from core.guidance.unet_level import DeepShrink, FreeU, FreeUV2
from core.sampling import Conditioning, SamplingRequest, empty_latent, for_family, latent_format_for, sample
from core.sampling.model_sampling import ModelSampling
from core.sampling.network import NetworkAdapter
from core.sampling.patches import NO_MODEL_PATCHES, ModelPatches
from tests.fixtures.tiny_models import TINY_MMDIT, TINY_UNET_SD1, TINY_UNET_SDXL, Tiny

pytestmark = pytest.mark.usefixtures("one_thread")

REQUEST = SamplingRequest(seed=4, steps=2, cfg=5.0, sampler="euler")


Setup = tuple[NetworkAdapter, ModelSampling, str, tuple[Conditioning, Conditioning]]


def _setup(tiny: Tiny) -> Setup:
    adapter = NetworkAdapter(tiny.reference())
    cfg = tiny.config
    g = torch.Generator().manual_seed(7)
    width = int(getattr(cfg, "context_dim"))  # noqa: B009
    pooled = getattr(cfg, "adm_in_channels", None)

    def cond() -> Conditioning:
        y = None if pooled is None else torch.randn(1, int(pooled), generator=g)
        return Conditioning(torch.randn(1, 6, width, generator=g), y)

    return adapter, for_family(tiny.family), tiny.family, (cond(), cond())


@pytest.fixture(scope="module", params=[TINY_UNET_SD1, TINY_UNET_SDXL], ids=["sd1", "sdxl"])
def unet(request: pytest.FixtureRequest) -> Iterator[tuple[Setup, Tensor]]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests (one_thread): pictures compare at one thread count
    setup = _setup(request.param)
    yield setup, _picture(setup)
    torch.set_num_threads(before)


def _picture(setup: Setup, *patches: GuidancePatch) -> Tensor:
    adapter, sampling, family, (pos, neg) = setup
    channels = getattr(adapter.config, "model_channels", None)
    ctx = GuidanceContext(adapter.patch_points, sampling, channels, resize)
    mp = NO_MODEL_PATCHES
    for p in patches:
        mp += p.model_patches(ctx)
    fmt = latent_format_for(family)
    latent = empty_latent(1, 96, 96, fmt)
    return sample(adapter, sampling, fmt, latent, pos, neg, REQUEST, patches=mp)


@pytest.mark.parametrize(
    ("patch", "neutral", "exact"),
    [
        (Pag(), Pag(scale=0.0), True),
        (Sag(scale=2.0), Sag(scale=0.0), True),
        (FreeU(), FreeU(b1=1.0, b2=1.0, s1=1.0, s2=1.0), False),
        (FreeUV2(), FreeUV2(b1=1.0, b2=1.0, s1=1.0, s2=1.0), False),
        (DeepShrink(end_percent=1.0), DeepShrink(downscale_factor=1.0, end_percent=1.0), False),
    ],
    ids=["pag", "sag", "freeu", "freeu_v2", "deep_shrink"],
)
def test_a_patch_changes_the_picture_and_is_no_patch_at_its_neutral_values(
    unet: tuple[Setup, Tensor],
    patch: GuidancePatch, neutral: GuidancePatch, exact: bool,
) -> None:  # fmt: skip
    setup, plain = unet
    changed = _picture(setup, patch)
    assert (changed - plain).abs().max() > 0.05
    same = _picture(setup, neutral)
    if exact:
        assert torch.equal(same, plain)
    else:  # an FFT round trip or a resize to the same size: float rounding only
        torch.testing.assert_close(same, plain, rtol=0, atol=2e-3)


def test_patches_compose_in_order_and_a_unet_refuses_skip_layer_guidance(
    unet: tuple[Setup, Tensor],
) -> None:
    setup, _ = unet
    both = _picture(setup, parse_patch("pag:2"), parse_patch("freeu_v2"))
    assert not torch.allclose(both, _picture(setup, parse_patch("pag:2")))
    with pytest.raises(LoadoutError, match="Skip Layer Guidance does not fit"):
        _picture(setup, Slg())


def test_skip_layer_guidance_on_the_mmdit_and_pag_freeu_refused_there() -> None:
    setup = _setup(TINY_MMDIT)
    plain = _picture(setup)
    everywhere = Slg(double_layers=(1,), single_layers=(), start_percent=0.0, end_percent=1.0)
    assert (_picture(setup, everywhere) - plain).abs().max() > 0.05
    assert torch.equal(_picture(setup, Slg(double_layers=(1,), scale=0.0)), plain)
    for refused in (Pag(), Sag(), FreeU(), DeepShrink()):
        with pytest.raises(LoadoutError, match="does not fit this diffusion model"):
            _picture(setup, refused)
    with pytest.raises(LoadoutError, match="no block joint 7"):
        _picture(setup, Slg())  # layers 7, 8, 9 of a 2-block MMDiT


def test_no_patch_is_no_model_patches() -> None:
    assert ModelPatches() == NO_MODEL_PATCHES
