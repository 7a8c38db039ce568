"""The hires fix end to end on the demo's tiny SD1 checkpoint: the picture equals the ComfyUI graph
composed by hand (KSampler -> LatentUpscaleBy -> KSampler with denoise -> VAEDecode) from the
sampling engine's own calls, whatever the VRAM limit; its parameters go into the PNG and come back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.errors import InterruptedByUser
from core.generate.command import generate_files
from core.generate.events import GenerateProgress
from core.generate.generator import Generator
from core.generate.hires_settings import HiresFix
from core.generate.parameters import parse_parameters
from core.generate.pipeline import Compute, Hooks, Pipeline
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.session_run import Output, _gather
from core.sampling import SamplingRequest, empty_latent, sample
from core.session import Placement, Session
from core.session.snapshots import SessionEvent
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _hand_composed(demo: DemoLibrary, settings: ImageSettings, mode: str) -> np.ndarray:
    """ComfyUI's two-KSampler graph, node by node, with the engine's own pieces."""
    session = Session(Placement(None))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    nets = _gather(session, {}).nets
    pipe = Pipeline(nets, Compute())
    positive, negative, _ = pipe.encode_prompts(settings, Hooks())
    s = settings.sampling
    cfg = pipe.cfg(settings)
    first = sample(
        pipe.adapter, pipe.sampling, pipe.latent_format,
        empty_latent(1, settings.width, settings.height, pipe.latent_format), positive, negative,
        SamplingRequest(s.seed, s.steps, cfg, s.sampler, s.scheduler),
    )  # fmt: skip
    hires = settings.hires
    assert hires is not None
    size = (round(first.shape[2] * hires.scale), round(first.shape[3] * hires.scale))
    bigger = F.interpolate(first, size=size, mode=mode)  # LatentUpscaleBy
    second = sample(
        pipe.adapter, pipe.sampling, pipe.latent_format, bigger, positive, negative,
        SamplingRequest(s.seed, hires.steps or s.steps, cfg, s.sampler, s.scheduler, hires.denoise),
    )  # fmt: skip
    with torch.inference_mode():
        pixels = nets.vae.decode(second, scaled=False)
    return to_uint8_rgb(pixels[0].float())


@pytest.mark.parametrize("mode", ["nearest-exact", "bilinear"])
def test_the_hires_picture_is_comfyuis_graph_composed_by_hand(
    demo: DemoLibrary, tmp_path: Path, mode: str
) -> None:
    hires = HiresFix(scale=1.5, denoise=0.6, steps=3, upscaler=mode)
    settings = ImageSettings(
        "a harbour", "fog", Sampling(seed=5, steps=4, sampler="dpmpp_2m", scheduler="karras"), 64, 64,
        hires=hires,
    )  # fmt: skip
    session = Session(Placement(None))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    result = Generator(session).generate(settings, Output(tmp_path / "h.png"), lambda p: None, lambda: None)
    got = _pixels(result.images[0].path)
    assert got.shape == (96, 96, 3)
    want = _hand_composed(demo, settings, mode)
    assert np.array_equal(got, want)
    # the second pass did something: a plain 96x96 picture from the same seed is another picture
    plain = ImageSettings("a harbour", "fog", settings.sampling, 96, 96)
    other = Generator(session).generate(plain, Output(tmp_path / "p.png"), lambda p: None, lambda: None)
    assert not np.array_equal(_pixels(other.images[0].path), got)


def test_hires_is_bit_identical_whatever_the_vram_limit_and_notes_its_phases(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    def make(limit: int | None, name: str) -> tuple[np.ndarray, dict[str, object]]:
        request = GenerateRequest(
            ModelFiles(checkpoint=demo.checkpoint),
            ImageSettings(
                "a lighthouse",
                "",
                Sampling(seed=7, steps=2, sampler="euler_ancestral"),
                64,
                64,
                hires=HiresFix(2.0, 0.5, None, "bislerp"),
            ),
            output=tmp_path / name,
            vram_limit=limit,
        )
        result = generate_files(request)
        return _pixels(result.images[0].path), result.to_json()

    whole, report = make(None, "whole.png")
    assert whole.shape == (128, 128, 3)
    assert set(report["seconds"]) == {"text_encode", "sample", "upscale", "decode"}  # type: ignore[arg-type]
    for limit in (48 << 20, 10 << 20):  # the text encoder streams; then the UNet is partly moved off
        picture, small = make(limit, f"limit{limit}.png")
        assert np.array_equal(picture, whole)
    partial = ("partial_load", "partial_unload")
    streamed = [e for e in small["events"] if e["kind"] in partial]  # type: ignore[union-attr]
    assert any(e["role"] == "diffusion_model" for e in streamed)


def test_the_memory_plot_sees_sample_1_upscale_sample_2(demo: DemoLibrary, tmp_path: Path) -> None:
    seen: list[SessionEvent] = []
    session = Session(Placement(None), on_event=seen.append)
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    settings = ImageSettings("x", sampling=Sampling(steps=2), width=64, height=64, hires=HiresFix(1.5, 0.5))
    Generator(session).generate(settings, Output(tmp_path / "a.png"), lambda p: None, lambda: None)
    labels = [e.label for e in seen if e.kind == "phase"]
    phases = [
        p for i, p in enumerate(labels) if i == 0 or labels[i - 1] != p
    ]  # prompt and negative: one band
    assert phases == ["encode", "sample 1", "upscale", "sample 2", "decode"]


def test_the_png_names_the_hires_fix_as_a1111_does_and_reading_it_restores_it(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings(
            "x",
            sampling=Sampling(seed=3, steps=3),
            width=64,
            height=64,
            hires=HiresFix(2.0, 0.45, 2, "bislerp"),
        ),
        output=tmp_path / "a.png",
    )
    result = generate_files(request)
    text = read_png_parameters(result.images[0].path)
    assert "Size: 64x64" in text  # A1111: the first pass's size
    assert (
        "Denoising strength: 0.45, Hires upscale: 2, Hires steps: 2, Hires upscaler: Latent (bislerp)" in text
    )
    p = parse_parameters(text)
    assert p.hires == HiresFix(2.0, 0.45, 2, "bislerp") and p.denoise is None


@pytest.mark.parametrize(
    ("label", "method"),
    [("Latent", "bilinear"), ("Latent (nearest)", "nearest-exact"), ("Latent (bicubic)", "bicubic")],
)
def test_a1111s_latent_names_read_as_comfyuis_methods(label: str, method: str) -> None:
    text = "x\nSteps: 20, Seed: 1, Size: 512x512, Denoising strength: 0.7, Hires upscale: 1.5, "
    text += f"Hires upscaler: {label}"
    p = parse_parameters(text)
    assert p.hires == HiresFix(1.5, 0.7, None, method)


def test_an_upscale_model_is_read_back_by_name() -> None:
    text = "x\nSteps: 20, Seed: 1, Size: 512x512, Denoising strength: 0.3, Hires upscale: 2, "
    text += "Hires upscaler: 4x-UltraSharp"
    p = parse_parameters(text)
    assert p.hires is not None and p.hires.model == Path("4x-UltraSharp") and p.hires.label == "4x-UltraSharp"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--hires-denoise", "0.5"], "without --hires-scale"),
        (["--hires-scale", "2", "--hires-upscaler", "lanczoz"], "lanczoz"),
        (["--hires-scale", "20"], "hires scale"),
        (["--hires-scale", "2", "--hires-denoise", "0"], "hires denoise"),
    ],
)
def test_bad_hires_options_say_what_is_wrong(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    out = tmp_path / "o.png"
    code = main(["generate", str(demo.checkpoint), "--prompt", "x", "-o", str(out), "--json", *args])
    _, err = capsys.readouterr()
    assert code != 0 and words in err and not out.exists()
    assert "Traceback" not in err


def test_the_cli_runs_the_hires_fix(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.png"
    args = [
        "generate",
        str(demo.checkpoint),
        "--prompt",
        "x",
        "--steps",
        "2",
        "--size",
        "64x64",
        "-o",
        str(out),
    ]
    code = main(
        [*args, "--json", "--hires-scale", "1.5", "--hires-denoise", "0.4", "--hires-upscaler", "area"]
    )
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(stdout)["images"] == [str(out)]
    assert _pixels(out).shape == (96, 96, 3)
    assert parse_parameters(read_png_parameters(out)).hires == HiresFix(1.5, 0.4, None, "area")


@pytest.mark.parametrize(("phase", "step", "pass_"), [("sample", 1, 2), ("upscale", 0, 1)])
def test_a_stop_in_the_hires_pass_writes_nothing(
    demo: DemoLibrary, tmp_path: Path, phase: str, step: int, pass_: int
) -> None:
    interrupt = threading.Event()
    seen = {"sample": 0, "upscale": 0}

    def progress(p: GenerateProgress) -> None:
        if p.step == 0 and p.phase in seen:
            seen[p.phase] += 1
        if p.phase == phase and p.step == step and seen[phase] == pass_:
            interrupt.set()

    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("x", sampling=Sampling(steps=2), width=64, height=64, hires=HiresFix(1.5, 0.5)),
        output=tmp_path / "never.png",
    )
    with pytest.raises(InterruptedByUser):
        generate_files(request, progress=progress, interrupt=interrupt)
    assert not list(tmp_path.iterdir())
