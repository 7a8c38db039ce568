"""Outpainting: ImagePadForOutpaint's padding and feathered mask against numbers computed with
ComfyUI's own node outside this repository (``tests/fixtures/golden/comfy_outpaint.json``: its
``nodes.ImagePadForOutpaint.expand_image`` run on seeded pictures, the masks written in full), then
the whole generation from the command line on the demo's SD1 checkpoint (a drawn picture grown on
two sides; the PNG's items read back) and, on a tiny UNet, the stages the pass plans: the padded
picture's latent kept where the mask is 0, the border painted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.generate.outpaint import feather_mask, pad_for_outpaint
from core.generate.outpaint_settings import Outpaint, outpaint_in, outpaint_parameters, parse_sides
from core.generate.parameters import parse_parameters
from core.generate.passes import Plan, Run, ordered
from core.generate.pipeline import Compute, Hooks, Pipeline, Timings
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_passes import passes_for
from tests.core.generate.test_inpaint import _nets
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.drawn import landscape

GOLDEN = json.loads((Path(__file__).parents[2] / "fixtures/golden/comfy_outpaint.json").read_text())


@pytest.mark.parametrize("name", list(GOLDEN))
def test_padding_and_mask_are_comfyui_image_pad_for_outpaint(name: str) -> None:
    case: dict[str, Any] = GOLDEN[name]
    h, w = case["height"], case["width"]
    rgb = np.random.default_rng(case["seed"]).integers(0, 256, (h, w, 3)).astype(np.uint8)
    o = Outpaint(case["left"], case["top"], case["right"], case["bottom"], case["feathering"])
    padded, mask = pad_for_outpaint(rgb, o)
    want = np.asarray(case["mask"], np.float64).astype(np.float32)
    assert mask.dtype == np.float32 and mask.shape == want.shape == (padded.shape[0], padded.shape[1])
    assert np.array_equal(mask, want)
    assert padded.shape[:2] == tuple(case["image_shape"][1:3])
    assert float(padded.astype(np.float64).sum()) / 255.0 == pytest.approx(
        case["image_sum"], rel=1e-7
    )  # ComfyUI: float32 / 255
    assert np.array_equal(feather_mask(h, w, o), mask)


def test_sides_are_read_and_checked() -> None:
    assert parse_sides("0,8,16,24", 5) == Outpaint(0, 8, 16, 24, 5)
    for bad in ("8,8,8", "a,0,0,0", "-8,0,0,0", "0,0,0,0", "99999,0,0,0"):
        with pytest.raises(LoadoutError):
            parse_sides(bad)
    o = Outpaint(64, 0, 32, 0, 12)
    assert outpaint_in(outpaint_parameters(o)) == o
    assert outpaint_in({"Outpaint": "1,2,x,4"}) is None and outpaint_in({}) is None
    with pytest.raises(LoadoutError, match="starting image"):
        ImageSettings("x", outpaint=o)
    with pytest.raises(LoadoutError, match="not both"):
        ImageSettings("x", outpaint=o, init_image=Path("a.png"), mask_image=Path("m.png"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("outpaint") / "demo")


def _generate(demo: DemoLibrary, init: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a house on a hill", "--seed", "4", "--steps", "3",
            "--init", str(init), "-o", str(out), "--quiet", *extra,
        ]
    )  # fmt: skip


def test_outpainting_from_the_command_line_grows_the_picture_and_keeps_it(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init = landscape(tmp_path / "house.png", 64, 64)
    out = tmp_path / "grown.png"
    assert _generate(demo, init, out, "--outpaint", "32,0,16,0", "--feather", "8") == 0, (
        capsys.readouterr().err
    )
    with Image.open(out) as im:
        grown = np.asarray(im.convert("RGB")).astype(np.int32)
    assert grown.shape == (64, 64 + 32 + 16, 3)
    p = parse_parameters(read_png_parameters(out))
    assert outpaint_in(p.extra) == Outpaint(32, 0, 16, 0, 8) and (p.width, p.height) == (112, 64)

    plain = tmp_path / "plain.png"
    assert _generate(demo, init, plain) == 0
    with Image.open(plain) as im:
        assert im.size == (64, 64)


def test_the_picture_latent_is_kept_where_the_mask_is_0_and_the_border_painted(tmp_path: Path) -> None:
    """The stages the outpainting pass plans, run on a tiny UNet: the latent the sampler returns is
    the padded picture's (VAEEncode) wherever the latent-size mask is 0, and new over the border."""
    nets = _nets(4)
    pipeline = Pipeline(nets, Compute())
    rgb = np.asarray(Image.open(landscape(tmp_path / "house.png", 64, 64)).convert("RGB"))
    o = Outpaint(32, 0, 16, 0, 8)
    settings = ImageSettings("a house", width=112, height=64, init_image=tmp_path / "house.png",
                             outpaint=o, sampling=Sampling(seed=3, steps=3))  # fmt: skip
    plan = Plan(pipeline)
    for p in ordered(passes_for(settings, rgb)):
        p.plan(plan, settings)
    run = Run(pipeline, settings, Hooks(), Timings(), rgb)
    latent = None
    for stage in plan.stages:
        latent = stage(latent, run)
    assert latent is not None and latent.samples.shape == (1, 4, 8, 14)
    padded, mask = pad_for_outpaint(rgb, o)
    picture = pipeline.encode_image(padded, Hooks())
    small = F.interpolate(torch.from_numpy(mask)[None, None], size=(8, 14), mode="bilinear")[0, 0]
    keep = small == 0
    assert int(keep.sum()) > 30
    assert torch.allclose(latent.samples[..., keep], picture[..., keep], atol=1e-5)
    border = small == 1
    assert float((latent.samples[..., border] - picture[..., border]).abs().mean()) > 0.1


def test_outpainting_without_a_picture_or_with_bad_sides_is_refused(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init = landscape(tmp_path / "house.png", 64, 64)
    assert _generate(demo, init, tmp_path / "x.png", "--outpaint", "8,8") != 0
    err = capsys.readouterr().err
    assert "left,top,right,bottom" in err and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()
