"""Regional conditioning against ComfyUI's own code.

The goldens (``tests/fixtures/golden/comfy_regions.json``) were made outside the repository by a
scratch script that built each case with ComfyUI's nodes (ConditioningSetArea, SetAreaPercentage,
SetMask "default" / "mask bounds", SetTimestepRange, Combine with the prompt) and ran them through
ComfyUI's CFGGuider (``process_conds`` -> ``sampling_function`` -> ``calc_cond_batch``) at commit
a125cd84 on CPU float32, with a real ``BaseModel`` of each family (SD1, SD3, Flux-dev) whose
network was :class:`RegionToy`: at three fixed (x, sigma) points, the guided output and
``calc_cond_batch``'s two estimates (recorded by a pre-CFG function), and whole KSampler runs
(``comfy.sample.sample``). Only summaries of the numbers are kept (:func:`assert_matches`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from core.models.patches import NO_PATCHES, NetworkPatches
from core.regions import Box, Region, box_area, latent_mask, negative_copies, region_entry
from core.sampling import Conditioning, SamplingRequest, empty_latent, for_family, latent_format_for, sample
from core.sampling.cfg import CfgDenoiser
from core.sampling.cond_entry import CondEntry
from core.sampling.denoiser import ModelDenoiser
from core.sampling.model_sampling import ModelSampling
from core.sampling.patches import ModelPatches
from tests.core.sampling.toy import assert_matches, load_golden

GOLDEN = load_golden("comfy_regions.json")
FAMILIES = {"sd1": (1 / 1000, 4), "sd3": (1 / 1000, 16), "flux-dev": (1.0, 16)}
LATENT = (16, 24)  # cells (height, width)
PICTURE = (192, 128)  # pixels (width, height)


class RegionToy:
    """Not local on purpose: a crop's output differs from the whole latent's at the same cells."""

    def __init__(self, t_scale: float, channels: int) -> None:
        self.t_scale = t_scale
        self.w = torch.linspace(-0.5, 0.5, channels)
        self.shapes: list[tuple[int, ...]] = []

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor:
        self.shapes.append(tuple(x.shape))
        tt = (timestep.float() * self.t_scale).view(-1, 1, 1, 1)
        bias = cond.context.mean(dim=(1, 2)).view(-1, 1, 1, 1) * self.w.view(1, -1, 1, 1)
        h, w = x.shape[-2], x.shape[-1]
        pos = torch.linspace(0.0, 0.1, h).view(1, 1, h, 1) + torch.linspace(-0.05, 0.0, w).view(1, 1, 1, w)
        glob = 0.3 * x.mean(dim=(2, 3), keepdim=True)
        return 0.9 * x + 0.2 * torch.sin(3.0 * x) + 0.05 * tt * x + bias + pos + glob


def text(seed: int, tokens: int) -> Conditioning:
    return Conditioning(torch.randn(1, tokens, 8, generator=torch.Generator().manual_seed(seed)))


def masks() -> tuple[Tensor, Tensor]:
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 128), torch.linspace(0, 1, 192), indexing="ij")
    soft = torch.clamp(1.2 - 6.0 * ((xx - 0.6) ** 2 + (yy - 0.45) ** 2), 0, 1)
    hard = torch.zeros(128, 192)
    hard[40:100, 20:90] = 1.0
    return soft, hard


def entries(case: str, ms: ModelSampling) -> tuple[CondEntry, ...]:
    """The case's positive entries, made by Loadout's resolver from the same inputs as the nodes."""
    a, b = text(3, 3), text(4, 6)
    soft, hard = masks()

    def entry(region: Region, cond: Conditioning, mask: Tensor | None = None) -> CondEntry:
        return region_entry(region, cond, mask, PICTURE, LATENT, ms)

    px, frac = Box, lambda *v: Box(*v, fractions=True)
    if case == "area_px":
        return (entry(Region("a", px(64, 32, 96, 64)), a),)
    if case == "area_pct":
        return (entry(Region("a", frac(0.25, 0.125, 0.5, 0.75), strength=0.6), a),)
    if case == "mask":
        return (entry(Region("a", mask=_PATH, strength=0.8), a, soft),)
    if case == "mask_bounds":
        return (entry(Region("a", mask=_PATH, strength=1.3, mask_bounds=True), a, hard),)
    if case == "overlap_range":
        second = Region("b", frac(0.4, 0.3, 0.6, 0.7), strength=0.7, start=0.2, end=0.7)
        return entry(Region("a", px(0, 0, 128, 96)), a), entry(second, b)
    if case == "area_mask":
        return (entry(Region("a", px(32, 16, 160, 96), mask=_PATH, strength=0.9), a, soft),)
    if case == "area_mask_strengths":  # SetArea strength 1.7, then SetMask 0.6: the entry itself
        area = box_area(px(32, 16, 160, 96), PICTURE, LATENT)
        return (CondEntry(a, area, 1.7, latent_mask(soft, LATENT), 0.6),)
    if case == "edge_area":
        return (entry(Region("a", px(96, 64, 96, 64), strength=1.2), a),)
    raise KeyError(case)


_PATH = __import__("pathlib").Path("mask.png")  # the records name a file; the tests hand the tensor


def setup(family: str) -> tuple[ModelSampling, RegionToy, int]:
    t_scale, channels = FAMILIES[family]
    return for_family(family), RegionToy(t_scale, channels), channels


def probe_x(channels: int, sigma: float) -> Tensor:
    x = torch.randn(2, channels, *LATENT, generator=torch.Generator().manual_seed(7))
    return x * max(sigma, 1.0) * 0.8 + 0.05


def patches(case: str, ms: ModelSampling) -> ModelPatches:
    pos = entries(case, ms)
    return ModelPatches(positive_conds=pos, negative_conds=negative_copies(pos))


PROBES: list[dict[str, Any]] = GOLDEN["probes"]


@pytest.mark.parametrize("probe", PROBES, ids=[f"{p['family']}-{p['case']}-cfg{p['cfg']}" for p in PROBES])
def test_one_model_call_matches_calc_cond_batch(probe: dict[str, Any]) -> None:
    ms, net, channels = setup(probe["family"])
    guided = CfgDenoiser(
        ModelDenoiser(net, ms), text(1, 3), text(2, 3), probe["cfg"], patches(probe["case"], ms)
    )
    for point in probe["points"]:
        x, sigma = probe_x(channels, point["sigma"]), torch.full((2,), point["sigma"])
        assert_matches(guided(x, sigma), point["out"])
        cond, *uncond = guided.estimates(guided.denoiser, x, sigma, negative=guided.uses_negative)
        assert_matches(cond, point["cond"])
        assert_matches(uncond[0] if uncond else torch.zeros_like(cond), point["uncond"])


RUNS: list[dict[str, Any]] = GOLDEN["runs"]


@pytest.mark.parametrize("run", RUNS, ids=[f"{r['family']}-{r['case']}-{r['sampler']}" for r in RUNS])
def test_ksampler_with_regions_matches_comfyui(run: dict[str, Any]) -> None:
    ms, net, _ = setup(run["family"])
    latent = empty_latent(2, *PICTURE, latent_format_for(run["family"]))
    request = SamplingRequest(
        seed=run["seed"],
        steps=run["steps"],
        cfg=run["cfg"],
        sampler=run["sampler"],
        scheduler=run["scheduler"],
    )
    fmt = latent_format_for(run["family"])
    out = sample(net, ms, fmt, latent, text(1, 3), text(2, 3), request, patches=patches(run["case"], ms))
    assert_matches(out, run["out"])


def test_regions_change_the_result_and_batch_by_crop() -> None:
    """Without entries the same call is the plain CFG of the two prompts; with them it differs, and
    the positive and negative entries of one crop run as one batch (negative first)."""
    ms, net, channels = setup("sd1")
    x, sigma = probe_x(channels, 2.0), torch.full((2,), 2.0)
    plain = CfgDenoiser(ModelDenoiser(net, ms), text(1, 3), text(2, 3), 6.5)(x, sigma)
    net.shapes.clear()
    regional = CfgDenoiser(ModelDenoiser(net, ms), text(1, 3), text(2, 3), 6.5, patches("area_px", ms))(
        x, sigma
    )
    assert not torch.allclose(plain, regional)
    assert net.shapes == [(4, channels, *LATENT), (4, channels, 8, 12)]
