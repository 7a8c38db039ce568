"""Regions end to end on the demo's tiny SD1 checkpoint: ``--region`` / ``--regions`` on the command
line change the picture, which equals the graph composed by hand (CLIPTextEncode of each region ->
its entry -> KSampler with the conditioning list -> VAEDecode); the PNG names the regions and reads
them back; bad regions are refused in words before any picture is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.generate.parameters import parse_parameters
from core.generate.pictures import read_mask
from core.generate.pipeline import Compute, Hooks, Pipeline, Timings
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import _gather
from core.regions import Box, Region, negative_copies, region_entry
from core.sampling import SamplingRequest, empty_latent, sample
from core.sampling.patches import ModelPatches
from core.session import Placement, Session
from tests.fixtures.demo_copy import DemoAt

pytestmark = pytest.mark.usefixtures("one_thread")

BASE = ["--prompt", "a lighthouse", "--negative", "fog", "--seed", "3", "--steps", "3", "--size", "96x64"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _generate(demo: DemoLibrary, out: Path, *more: str) -> int:
    return main(["generate", str(demo.checkpoint), *BASE, *more, "-o", str(out), "--quiet"])


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _by_hand(demo: DemoLibrary, regions: tuple[Region, ...]) -> np.ndarray:
    """KSampler on the prompt combined with the regions' conditionings, composed from the engine's
    own steps; then VAEDecode."""
    session = Session(Placement(None))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    pipe = Pipeline(_gather(session, {}).nets, Compute())
    settings = ImageSettings("a lighthouse", "fog", Sampling(seed=3, steps=3), width=96, height=64)
    pos, neg, _ = pipe.encode_prompts(settings, Hooks(), announce=False)
    entries = []
    for r in regions:
        cond, _ = pipe.encode_prompt(r.prompt, settings, Hooks())
        mask = None if r.mask is None else torch.from_numpy(read_mask(r.mask))
        entries.append(region_entry(r, cond, mask, (96, 64), (8, 12), pipe.sampling))
    patches = ModelPatches(positive_conds=tuple(entries), negative_conds=negative_copies(entries))
    request = SamplingRequest(seed=3, steps=3, cfg=pipe.cfg(settings))
    latent = empty_latent(1, 96, 64, pipe.latent_format)
    out = sample(pipe.adapter, pipe.sampling, pipe.latent_format, latent, pos, neg, request, patches=patches)
    return to_uint8_rgb(pipe.decode(out, Hooks(), Timings())[0])


def test_regions_change_the_picture_equal_the_graph_and_come_back_from_the_png(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mask = np.zeros((64, 96), np.uint8)
    mask[8:56, 40:90] = 255
    Image.fromarray(mask).save(tmp_path / "sea.png")
    (tmp_path / "regions.json").write_text(
        json.dumps([{"prompt": "a stormy sea", "mask": "sea.png", "strength": 0.9}])
    )
    assert _generate(demo, tmp_path / "plain.png") == 0
    more = ["--regions", str(tmp_path / "regions.json"), "--region", "0,0,48,64:1.5@0-0.6=a red boat"]
    assert _generate(demo, tmp_path / "regions.png", *more) == 0, capsys.readouterr().err
    got = _pixels(tmp_path / "regions.png")
    assert not np.array_equal(_pixels(tmp_path / "plain.png"), got)
    regions = (
        Region("a stormy sea", mask=tmp_path / "sea.png", strength=0.9),
        Region("a red boat", Box(0, 0, 48, 64), strength=1.5, start=0.0, end=0.6),
    )
    assert np.array_equal(got, _by_hand(demo, regions))
    text = read_png_parameters(tmp_path / "regions.png")
    assert "Regions: " in text and "a red boat" in text
    assert parse_parameters(text).regions == regions
    assert "Regions" not in (read_png_parameters(tmp_path / "plain.png") or "")


@pytest.mark.parametrize(
    ("region", "words"),
    [
        ("40,0,64,64=a boat", "reaches outside the 96x64 picture"),
        ("0,0,48,64=  ", "a region has an empty prompt"),
        ("0,0,48,64@0.8-0.2=a boat", "starts at 0.8, after its end 0.2"),
        ("0,0,48,64@0-1.5=a boat", "out of range"),
        ("0,0,4,4=a boat", "smaller than one latent cell"),
        ("0,0,48=a boat", "is not four numbers"),
        ("0.5,0,0.6,1.0=a boat", "reaches outside the picture"),
    ],
)
def test_bad_regions_are_refused_in_words_before_any_picture(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str], region: str, words: str
) -> None:
    assert _generate(demo, tmp_path / "bad.png", "--region", region) != 0
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "bad.png").exists()


def test_a_bad_regions_file_is_refused_in_words(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "r.json").write_text('[{"prompt": "a boat", "box": [0, 0, 48], "colour": 1}]')
    assert _generate(demo, tmp_path / "bad.png", "--regions", str(tmp_path / "r.json")) != 0
    assert "unknown region keys ['colour']" in capsys.readouterr().err
    assert _generate(demo, tmp_path / "bad.png", "--regions", str(tmp_path / "missing.json")) != 0
    assert "the regions file" in capsys.readouterr().err


def test_regions_follow_the_hires_pass(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hires = ["--hires-scale", "2", "--hires-denoise", "0.5", "--hires-steps", "2"]
    assert _generate(demo, tmp_path / "plain.png", *hires) == 0
    assert _generate(demo, tmp_path / "r.png", *hires, "--region", "0,0,48,64=a red boat") == 0, (
        capsys.readouterr().err
    )
    got = _pixels(tmp_path / "r.png")
    assert got.shape == (128, 192, 3) and not np.array_equal(got, _pixels(tmp_path / "plain.png"))
    assert parse_parameters(read_png_parameters(tmp_path / "r.png")).regions == (
        Region("a red boat", Box(0, 0, 48, 64)),
    )
