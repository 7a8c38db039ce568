"""The hires fix with an upscale model file: decode -> the model -> resize to the scale -> encode ->
the second pass, equal to ComfyUI's graph composed by hand (VAEDecode -> ImageUpscaleWithModel ->
ImageScaleBy -> VAEEncode -> KSampler), and the same picture whatever the card."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file

from app.demo import DemoLibrary
from core.generate.command import generate_files
from core.generate.hires_settings import HiresFix
from core.generate.parameters import parse_parameters
from core.generate.pipeline import Compute, Hooks, Pipeline
from core.generate.png import to_uint8_rgb
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.session_run import _gather
from core.sampling import SamplingRequest, empty_latent, sample
from core.session import Placement, Session
from core.upscale.arches import registry
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.upscale_models import write_rrdb


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def rrdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rrdb(tmp_path_factory.mktemp("up") / "4x-tiny.safetensors", seed=4)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _hand_composed(demo: DemoLibrary, rrdb: Path, settings: ImageSettings) -> np.ndarray:
    session = Session(Placement(None))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    nets = _gather(session, {}).nets
    pipe = Pipeline(nets, Compute())
    positive, negative, _ = pipe.encode_prompts(settings, Hooks())
    s, hires = settings.sampling, settings.hires
    assert hires is not None
    cfg = pipe.cfg(settings)
    first = sample(
        pipe.adapter, pipe.sampling, pipe.latent_format,
        empty_latent(1, settings.width, settings.height, pipe.latent_format), positive, negative,
        SamplingRequest(s.seed, s.steps, cfg, s.sampler, s.scheduler),
    )  # fmt: skip
    registry()
    esrgan = importlib.import_module("spandrel.architectures.ESRGAN")
    model = esrgan.ESRGANArch().load(load_file(str(rrdb))).eval()
    with torch.inference_mode():
        image = torch.clamp((nets.vae.decode(first, scaled=False) + 1.0) / 2.0, 0.0, 1.0)  # VAEDecode
        big = model(image).clamp(0, 1)  # ImageUpscaleWithModel (one tile)
        size = (round(big.shape[2] * hires.scale / 4), round(big.shape[3] * hires.scale / 4))
        big = F.interpolate(big, size=size, mode="area")  # ImageScaleBy
        latent = nets.vae.moments(big * 2.0 - 1.0).chunk(2, dim=1)[0]  # VAEEncode
    second = sample(
        pipe.adapter, pipe.sampling, pipe.latent_format, latent, positive, negative,
        SamplingRequest(s.seed, hires.steps or s.steps, cfg, s.sampler, s.scheduler, hires.denoise),
    )  # fmt: skip
    with torch.inference_mode():
        pixels = nets.vae.decode(second, scaled=False)
    return to_uint8_rgb(pixels[0].float())


def test_hires_with_an_upscale_model_is_comfyuis_graph_and_the_same_on_any_card(
    demo: DemoLibrary, rrdb: Path, tmp_path: Path
) -> None:
    settings = ImageSettings(
        "a harbour", "", Sampling(seed=9, steps=3, sampler="euler"), 64, 64,
        hires=HiresFix(2.0, 0.55, 2, model=rrdb),
    )  # fmt: skip

    def make(limit: int | None) -> tuple[np.ndarray, dict[str, object]]:
        request = GenerateRequest(
            ModelFiles(checkpoint=demo.checkpoint),
            settings,
            output=tmp_path / f"{limit}.png",
            vram_limit=limit,
        )
        result = generate_files(request)
        assert "Hires upscaler: 4x-tiny" in result.images[0].infotext
        assert parse_parameters(result.images[0].infotext).hires == HiresFix(
            2.0, 0.55, 2, model=Path("4x-tiny")
        )
        return _pixels(result.images[0].path), result.to_json()

    whole, report = make(None)
    assert whole.shape == (128, 128, 3)
    assert np.array_equal(whole, _hand_composed(demo, rrdb, settings))
    assert any(e["role"] == "upscale_model" for e in report["events"])  # type: ignore[union-attr]
    small, _ = make(14 << 20)
    assert np.array_equal(small, whole)
