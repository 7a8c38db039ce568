"""Regions of the negative prompt. The conditioning lists the sampler weighs are ComfyUI's after
``process_conds``: each area of one prompt copied to the other's list by
``create_cond_with_same_area_if_none`` (the positive's areas first, then the negative's, the
copies just made included; a copy takes the conditioning of the smallest entry of the other list
whose area holds it, none when one has its very area) -- the lists below worked out by hand from
that code. End to end: ``--region negative:...`` changes the picture, equals the graph composed by
hand (the region's entry in the negative's list), and the PNG names it and reads it back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.generate.parameters import parse_parameters
from core.generate.pipeline import Compute, Hooks, Pipeline, Timings
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import _gather
from core.regions import Box, Region, region_entry
from core.regions.text import parse_region, regions_from_json, regions_to_json
from core.sampling import Conditioning, SamplingRequest, empty_latent, sample
from core.sampling.cond_entry import CondEntry, LatentArea, with_area_copies
from core.sampling.patches import ModelPatches
from core.session import Placement, Session
from tests.fixtures.demo_copy import DemoAt

pytestmark = pytest.mark.usefixtures("one_thread")
WHOLE = CondEntry(None)


def _cond(v: float) -> Conditioning:
    return Conditioning(torch.full((1, 4, 8), v))


def test_each_area_is_copied_to_the_other_list_with_the_smallest_holding_entrys_conditioning() -> None:
    a = CondEntry(_cond(1.0), LatentArea(4, 4, 0, 0), 0.7)  # a positive region
    b = CondEntry(_cond(2.0), LatentArea(8, 8, 0, 0), 0.5)  # a larger negative region holding it
    pos, neg = with_area_copies([WHOLE, a], [WHOLE, b])
    # a -> the negative list with b's conditioning (b holds a and is smaller than the whole);
    # b -> the positive list with the positive's own (a does not hold b); a's copy finds a itself
    assert neg == (WHOLE, b, CondEntry(b.cond, a.area, 0.7))
    assert pos == (WHOLE, a, CondEntry(None, b.area, 0.5))
    same = CondEntry(_cond(3.0), a.area, 2.0)  # one area on both prompts: no copy either way
    assert with_area_copies([WHOLE, a], [WHOLE, same]) == ((WHOLE, a), (WHOLE, same))
    masked = CondEntry(_cond(4.0), None, 1.0, torch.ones(1, 8, 8))  # a mask alone has no area
    assert with_area_copies([WHOLE], [WHOLE, masked]) == ((WHOLE,), (WHOLE, masked))


def test_the_text_forms_carry_the_negative_mark() -> None:
    region = parse_region("negative: 0,0,48,64:0.8=a red boat")
    assert region == Region("a red boat", Box(0, 0, 48, 64), strength=0.8, negative=True)
    assert regions_from_json(regions_to_json((region,))) == (region,)
    assert '"negative":true' in regions_to_json((region,))
    assert not parse_region("0,0,48,64=a boat").negative


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _by_hand(demo: DemoLibrary, region: Region) -> np.ndarray:
    session = Session(Placement(None))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    pipe = Pipeline(_gather(session, {}).nets, Compute())
    settings = ImageSettings("a lighthouse", "fog", Sampling(seed=3, steps=2), width=96, height=64)
    pos, neg, _ = pipe.encode_prompts(settings, Hooks(), announce=False)
    cond, _ = pipe.encode_prompt(region.prompt, settings, Hooks())
    entry = region_entry(region, cond, None, (96, 64), (8, 12), pipe.sampling)
    request = SamplingRequest(seed=3, steps=2, cfg=pipe.cfg(settings))
    latent = empty_latent(1, 96, 64, pipe.latent_format)
    patches = ModelPatches(negative_conds=(entry,))
    out = sample(pipe.adapter, pipe.sampling, pipe.latent_format, latent, pos, neg, request, patches=patches)
    return to_uint8_rgb(pipe.decode(out, Hooks(), Timings())[0])


def test_a_negative_region_from_the_cli_equals_the_graph_and_reads_back(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    base = ["generate", str(demo.checkpoint), "--prompt", "a lighthouse", "--negative", "fog", "--seed", "3",
            "--steps", "2", "--size", "96x64", "--quiet"]  # fmt: skip
    assert main([*base, "-o", str(tmp_path / "plain.png")]) == 0
    assert main([*base, "--region", "negative:0,0,48,64=a red boat", "-o", str(tmp_path / "n.png")]) == 0
    with Image.open(tmp_path / "n.png") as im:
        got = np.asarray(im.convert("RGB"))
    with Image.open(tmp_path / "plain.png") as im:
        assert not np.array_equal(got, np.asarray(im.convert("RGB")))
    region = Region("a red boat", Box(0, 0, 48, 64), negative=True)
    assert np.array_equal(got, _by_hand(demo, region))
    assert parse_parameters(read_png_parameters(tmp_path / "n.png")).regions == (region,)
