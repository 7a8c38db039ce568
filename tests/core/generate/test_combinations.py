"""Workflows combined, each picture against the ComfyUI graph composed by hand from the engine's own
primitive steps (KSampler/KSamplerAdvanced = ``sample`` with a schedule cut at the start and end
steps, LatentUpscaleBy = ``upscale_by``, SetLatentNoiseMask = ``denoise_mask``,
ControlNetApplyAdvanced = ``applied`` as the sampler's model wrapper, VAEDecode), on the tiny SDXL
base, refiner and ControlNet files and the demo's SD1 checkpoint (real layouts, seeded random
weights).

The two pictures that were wrong before the workflows became passes:

* hires fix + refiner: the refiner's hand-off replaced the whole run, so the picture came out at the
  first pass's size while its PNG said ``Hires upscale: 2``. Now the refiner finishes the last
  sampling pass (the hires pass), as A1111's default "second pass" does.
* inpainting mask + refiner: the refiner's KSamplerAdvanced repainted the area the mask keeps; the
  noise mask is carried to it, as ComfyUI's LATENT carries ``noise_mask`` from one sampler to the next.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.generate.command import generate_files
from core.generate.controlnet import ControlNetCache, applied
from core.generate.hires_settings import HiresFix
from core.generate.latent_upscale import upscale_by
from core.generate.parameters import parse_parameters
from core.generate.pictures import read_mask, read_picture
from core.generate.pipeline import Compute, Hooks, Pipeline
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.refiner import load_refiner, refiner_networks
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.session_run import _gather
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.sampling import SamplingRequest, empty_latent, ksampler_sigmas, sample
from core.sampling.patches import NO_MODEL_PATCHES, ModelPatches
from core.session import Placement, Session
from tests.fixtures.controlnets import hint_picture, mask_picture, tiny_controlnet_file
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.sdxl_tiny import write_sdxl_controlnet, write_sdxl_pair

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Files:
    base: Path
    refiner: Path
    init: Path
    keep_all: Path  # a black mask: nothing is repainted
    right: Path  # the right half is repainted
    controlnet: Path  # an SDXL ControlNet for the base
    hint: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("combos")
    base, refiner = write_sdxl_pair(root / "sdxl")
    rng = np.random.default_rng(1)
    init = root / "init.png"
    Image.fromarray(rng.integers(40, 220, (64, 64, 3), dtype=np.uint8)).save(init)
    black = root / "keep.png"
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(black)
    right = np.zeros((64, 64), np.uint8)
    right[:, 32:] = 255
    Image.fromarray(right).save(root / "right.png")
    cn = write_sdxl_controlnet(root / "control_sdxl_tiny.safetensors")
    return Files(base, refiner, init, black, root / "right.png", cn, hint_picture(root / "hint.png", 96, 64))


def _generate(
    files: Files, settings: ImageSettings, out: Path, checkpoint: Path | None = None
) -> tuple[np.ndarray, str]:
    request = GenerateRequest(ModelFiles(checkpoint=checkpoint or files.base), settings, output=out)
    path = generate_files(request).images[0].path
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")), read_png_parameters(path)


@dataclass
class Graph:
    """The loaded networks a hand-composed graph wires together."""

    base: Pipeline
    refiner: Pipeline


def _base(checkpoint: Path) -> Pipeline:
    session = Session(Placement(None))
    session.load(checkpoint, "checkpoint", lambda p: None, lambda: None)
    return Pipeline(_gather(session, {}).nets, Compute())


@pytest.fixture(scope="module")
def graph(files: Files) -> Graph:
    base = _base(files.base)
    refiner = refiner_networks(load_refiner(files.refiner), base.nets)
    return Graph(base, Pipeline(refiner, Compute()))


def _controlnet_apply(pipe: Pipeline, uses: tuple[ControlNetUse, ...]) -> ModelPatches:
    """ControlNetApplyAdvanced on positive and negative: the nets as the base sampler's wrapper."""
    loaded = [ControlNetCache().get(u.path) for u in uses]
    return ModelPatches(wrappers=(applied(uses, loaded, pipe.sampling),))


def _request(s: Sampling, steps: int | None = None) -> SamplingRequest:
    return SamplingRequest(s.seed, steps or s.steps, s.cfg or 5.0, s.sampler, s.scheduler, s.denoise)


def _ksampler_advanced(
    pipe: Pipeline, latent: torch.Tensor, settings: ImageSettings, sigmas: torch.Tensor | None,
    *, add_noise: bool = True, mask: torch.Tensor | None = None, patches: ModelPatches = NO_MODEL_PATCHES,
    sampling: Sampling | None = None,
) -> torch.Tensor:  # fmt: skip
    """KSamplerAdvanced: the prompts at ``settings``' size, the schedule's steps ``sigmas`` (None:
    KSampler's whole schedule of ``sampling``)."""
    positive, negative, _ = pipe.encode_prompts(settings, Hooks())
    return sample(
        pipe.adapter, pipe.sampling, pipe.latent_format, latent, positive, negative,
        _request(sampling or settings.sampling), sigmas=sigmas, add_noise=add_noise, denoise_mask=mask,
        patches=patches,
    )  # fmt: skip


def _decode(pipe: Pipeline, latent: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return to_uint8_rgb(pipe.nets.vae.decode(latent, scaled=False)[0].float())


def _handoff(
    g: Graph, latent: torch.Tensor, settings: ImageSettings, s: Sampling, switch: float,
    mask: torch.Tensor | None = None, patches: ModelPatches = NO_MODEL_PATCHES,
) -> torch.Tensor:  # fmt: skip
    """Base KSamplerAdvanced to the switch step (leftover noise), refiner KSamplerAdvanced after."""
    sigmas = ksampler_sigmas(g.base.sampling, s.scheduler, s.sampler, s.steps, s.denoise)
    cut = RefinerUse(Path("r"), switch).switch_step(s.steps)
    x = _ksampler_advanced(g.base, latent, settings, sigmas[: cut + 1], mask=mask, patches=patches)
    return _ksampler_advanced(g.refiner, x, settings, sigmas[cut:], add_noise=False, mask=mask)


def test_hires_and_refiner_give_the_hires_size_and_the_graph_composed_by_hand(
    files: Files, graph: Graph, tmp_path: Path
) -> None:
    hires = HiresFix(scale=2.0, denoise=0.6, steps=3)
    s = Sampling(seed=5, steps=4, cfg=5.0)
    settings = ImageSettings(
        "a red fox", "blurry", s, 64, 64, hires=hires, refiner=RefinerUse(files.refiner, 0.5)
    )
    got, text = _generate(files, settings, tmp_path / "hr.png")
    assert got.shape == (128, 128, 3)  # was 64x64 with "Hires upscale: 2" in its PNG
    assert "Hires upscale: 2" in text and "Refiner switch at: 0.5" in text

    # KSampler (base) -> LatentUpscaleBy -> KSamplerAdvanced (base) -> KSamplerAdvanced (refiner) -> VAEDecode
    first = sample(
        graph.base.adapter, graph.base.sampling, graph.base.latent_format,
        empty_latent(1, 64, 64, graph.base.latent_format),
        *graph.base.encode_prompts(replace(settings, hires=None), Hooks(), announce=False)[:2], _request(s),
    )  # fmt: skip
    big = upscale_by(first, hires.scale, hires.upscaler)
    sized = replace(settings, width=128, height=128, hires=None)
    second = _handoff(graph, big, sized, replace(s, steps=3, denoise=0.6), 0.5)
    assert np.array_equal(got, _decode(graph.base, second))


def test_mask_and_refiner_keep_the_masked_area_as_comfyuis_graph_does(
    files: Files, graph: Graph, tmp_path: Path
) -> None:
    s = Sampling(seed=6, steps=4, cfg=5.0, denoise=0.8)
    init = graph.base.encode_image(read_picture(files.init), Hooks())
    for mask in (files.keep_all, files.right):
        settings = ImageSettings(
            "a red fox", "blurry", s, 64, 64, init_image=files.init, mask_image=mask,
            refiner=RefinerUse(files.refiner, 0.5),
        )  # fmt: skip
        got, _ = _generate(files, settings, tmp_path / f"{mask.stem}.png")
        m = torch.from_numpy(read_mask(mask))
        want = _handoff(graph, init, settings, s, 0.5, mask=m)
        assert np.array_equal(got, _decode(graph.base, want)), mask.stem
    # with nothing to repaint the refiner changes nothing: the picture is what the base handed over
    sigmas = ksampler_sigmas(graph.base.sampling, s.scheduler, s.sampler, s.steps, s.denoise)
    m = torch.from_numpy(read_mask(files.keep_all))
    handed = _ksampler_advanced(graph.base, init, settings, sigmas[:3], add_noise=True, mask=m)
    keep, _ = _generate(files, replace(settings, mask_image=files.keep_all), tmp_path / "keep2.png")
    assert np.array_equal(keep, _decode(graph.base, handed))
    assert parse_parameters(read_png_parameters(tmp_path / "keep2.png")).extra["Refiner switch at"] == "0.5"


def test_controlnet_hires_and_refiner_as_comfyuis_graph(files: Files, graph: Graph, tmp_path: Path) -> None:
    """The ControlNet acts on the base model's samplers (first pass and the hires pass's base part),
    not on the refiner's, which has its own conditioning."""
    hires = HiresFix(scale=1.5, denoise=0.6, steps=3)
    s = Sampling(seed=7, steps=4, cfg=5.0)
    uses = (ControlNetUse(files.controlnet, files.hint, 0.8, 0.0, 0.9),)
    refiner = RefinerUse(files.refiner, 0.5)
    settings = ImageSettings("a red fox", "blurry", s, 64, 64, hires=hires, refiner=refiner, controlnets=uses)
    got, text = _generate(files, settings, tmp_path / "cn.png")
    assert got.shape == (96, 96, 3) and "ControlNet 0" in text and "Refiner" in text

    control = _controlnet_apply(graph.base, uses)
    plain = replace(settings, hires=None)
    first = _ksampler_advanced(
        graph.base, empty_latent(1, 64, 64, graph.base.latent_format), plain, None, patches=control
    )
    big = upscale_by(first, hires.scale, hires.upscaler)
    sized = replace(plain, width=96, height=96)
    second = _handoff(graph, big, sized, replace(s, steps=3, denoise=0.6), 0.5, patches=control)
    assert np.array_equal(got, _decode(graph.base, second))
    without, _ = _generate(files, replace(settings, controlnets=()), tmp_path / "plain.png")
    assert not np.array_equal(got, without)


def test_mask_and_controlnet_as_comfyuis_graph(tmp_path: Path, demo_library_at: DemoAt) -> None:
    """VAEEncode -> SetLatentNoiseMask -> KSampler with ControlNetApplyAdvanced on the demo's SD1."""
    demo = demo_library_at(tmp_path / "demo")
    uses = (
        ControlNetUse(tiny_controlnet_file(tmp_path / "cn.safetensors"), hint_picture(tmp_path / "h.png")),
    )
    mask = mask_picture(tmp_path / "mask.png")
    init = tmp_path / "init.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(init)
    s = Sampling(seed=3, steps=3, cfg=5.0, denoise=0.9)
    settings = ImageSettings(
        "a lighthouse", "fog", s, 64, 64, init_image=init, mask_image=mask, controlnets=uses
    )
    files = Files(demo.checkpoint, demo.checkpoint, init, mask, mask, demo.checkpoint, init)
    got, _ = _generate(files, settings, tmp_path / "out.png")

    pipe = _base(demo.checkpoint)
    latent = pipe.encode_image(read_picture(init), Hooks())
    m = torch.from_numpy(read_mask(mask))
    want = _ksampler_advanced(pipe, latent, settings, None, mask=m, patches=_controlnet_apply(pipe, uses))
    assert np.array_equal(got, _decode(pipe, want))
