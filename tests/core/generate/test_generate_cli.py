"""``loadout generate`` end to end on the demo's tiny SD1 checkpoint: real files, real networks."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.errors import InterruptedByUser, LoadoutError
from core.generate.command import generate_files
from core.generate.events import GenerateProgress
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.patching.merge import LoraArg
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_generate_writes_pngs_with_their_parameters_and_the_json_contract(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pics" / "castle.png"
    code, stdout, err = _run(
        [
            "generate", str(demo.checkpoint), "--prompt", "a castle, (sunset:1.2)", "--negative", "blurry",
            "--lora", f"{demo.lora}:0.8", "--seed", "42", "--steps", "3", "--size", "64x96", "--batch", "2",
            "--sampler", "dpmpp_2m", "--scheduler", "karras", "--cfg", "5.5", "-o", str(out), "--json",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout)
    assert set(report) >= {"images", "seed", "seconds_per_step", "seconds", "peak_bytes", "events"}
    assert set(report["seconds"]) == {"text_encode", "sample", "decode"}
    assert report["images"] == [str(out), str(out.with_name("castle-2.png"))]
    roles = {e["role"] for e in report["events"]}
    assert {"text_encoder", "diffusion_model", "vae"} <= roles  # each phase placed by the manager
    for path in report["images"]:
        assert _pixels(Path(path)).shape == (96, 64, 3)
    p = parse_parameters(read_png_parameters(out))
    assert (p.prompt, p.negative, p.seed, p.steps, p.sampler, p.scheduler, p.cfg) == (
        "a castle, (sunset:1.2)", "blurry", 42, 3, "dpmpp_2m", "karras", 5.5,
    )  # fmt: skip
    assert (p.width, p.height, p.model) == (64, 96, demo.checkpoint.stem)
    assert len(p.model_hash) == 10 and p.loras[0].name == demo.lora.stem and p.loras[0].model_strength == 0.8
    assert len(p.loras[0].hash) == 12


def test_the_picture_is_bit_identical_whatever_the_vram_limit(demo: DemoLibrary, tmp_path: Path) -> None:
    def make(limit: int | None, name: str) -> np.ndarray:
        request = GenerateRequest(
            ModelFiles(checkpoint=demo.checkpoint),
            ImageSettings(
                "a lighthouse", "fog", Sampling(seed=7, steps=2, sampler="euler_ancestral"), 64, 64
            ),
            loras=(LoraArg(demo.lora, 0.7, 0.7),),
            output=tmp_path / name,
            vram_limit=limit,
        )
        result = generate_files(request)
        assert not any("tiles" in n for n in result.notes)
        return _pixels(result.images[0].path)

    whole = make(None, "whole.png")
    for limit in (48 << 20, 6 << 20):  # the text encoder streams; then the UNet too
        assert np.array_equal(make(limit, f"limit{limit}.png"), whole)


@pytest.mark.slow
def test_a_card_without_room_for_a_whole_decode_decodes_in_tiles(demo: DemoLibrary, tmp_path: Path) -> None:
    """The whole 512x768 decode needs more than a 256 MiB card has; one 512x512 tile does not.
    The decode is placed with a tile's room and runs in tiles (it was refused: found on a real
    H200 with SDXL at 1024x1024 on a simulated 2 GiB card)."""
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a tower", sampling=Sampling(seed=3, steps=1), width=512, height=768),
        output=tmp_path / "tiles.png",
        vram_limit=256 << 20,
    )
    result = generate_files(request)
    assert any("tiles" in n for n in result.notes)
    assert _pixels(result.images[0].path).shape == (768, 512, 3)


def test_stop_during_sampling_writes_nothing(demo: DemoLibrary, tmp_path: Path) -> None:
    interrupt = threading.Event()

    def progress(p: GenerateProgress) -> None:
        if p.phase == "sample" and p.step == 1:
            interrupt.set()

    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("x", sampling=Sampling(steps=4), width=64, height=64),
        output=tmp_path / "never.png",
    )
    with pytest.raises(InterruptedByUser):
        generate_files(request, progress=progress, interrupt=interrupt)
    assert not list(tmp_path.iterdir())


def test_img2img_starts_from_a_picture(demo: DemoLibrary, tmp_path: Path) -> None:
    init = tmp_path / "init.png"
    Image.fromarray(np.full((70, 66, 3), 120, np.uint8)).save(init)  # cropped to 64x64 as ComfyUI does
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a tree", sampling=Sampling(seed=1, steps=4, denoise=0.5), init_image=init),
        output=tmp_path / "out.png",
    )
    result = generate_files(request)
    assert _pixels(result.images[0].path).shape == (64, 64, 3)
    assert parse_parameters(result.images[0].infotext).denoise == 0.5


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--prompt", "x", "-o", "o.png"], "neither a checkpoint nor a diffusion model"),
        (["missing.safetensors", "--prompt", "x", "-o", "o.png"], "missing.safetensors"),
        (["CKPT", "--prompt", "x", "--size", "70x64", "-o", "o.png"], "multiples of 8"),
        (["CKPT", "--prompt", "x", "--steps", "0", "-o", "o.png"], "steps"),
        (["CKPT", "--diffusion-model", "CKPT", "--prompt", "x", "-o", "o.png"], "both a checkpoint"),
        (["CKPT", "--prompt", "x", "--init", "nope.png", "--denoise", "0.5", "-o", "o.png"], "nope.png"),
    ],
)
def test_bad_input_says_what_is_wrong(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    args = [str(demo.checkpoint) if a == "CKPT" else a for a in args]
    args = [str(tmp_path / a) if a.endswith(".png") or a == "missing.safetensors" else a for a in args]
    code, _, err = _run(["generate", *args], capsys)
    assert code == 2 and words.lower() in err.lower() and "Traceback" not in err


def test_an_unknown_sampler_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "m.safetensors", "--prompt", "x", "--sampler", "nope", "-o", "o.png"])
    assert exc.value.code == 2 and "euler_ancestral" in capsys.readouterr().err


def test_settings_are_checked_before_anything_loads() -> None:
    with pytest.raises(LoadoutError, match=r"(?i)denoise below 1 needs a starting image"):
        ImageSettings("x", sampling=Sampling(denoise=0.5))


def test_a_strength_sweep_makes_one_picture_per_strength_and_a_grid(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fox.png"
    code, stdout, err = _run(
        [
            "generate", str(demo.checkpoint), "--prompt", "a fox", "--lora", f"{demo.lora}:1.0",
            "--seed", "3", "--steps", "2", "--size", "64x64", "--sweep", "0,0.7,1.5", "-o", str(out),
            "--json",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    images = [Path(p) for p in json.loads(stdout)["images"]]
    assert [p.name for p in images] == ["fox-0-grid.png", "fox-0.png", "fox-0.7.png", "fox-1.5.png"]
    grid = _pixels(images[0])
    assert grid.shape[1] == 3 * 64 and grid.shape[0] > 64  # three cells side by side, labels below
    cells = [_pixels(p) for p in images[1:]]
    assert not np.array_equal(cells[0], cells[2])  # the LoRA's strength shows
    strengths = [parse_parameters(read_png_parameters(p)).loras for p in images[1:]]
    assert [lo[0].model_strength for lo in strengths] == [0.0, 0.7, 1.5]  # each cell says its strength


def test_a_sweep_without_a_lora_is_refused(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        [
            "generate",
            str(demo.checkpoint),
            "--prompt",
            "x",
            "--sweep",
            "0.5,1",
            "-o",
            str(tmp_path / "o.png"),
        ],
        capsys,
    )
    assert code == 2 and "needs a LoRA" in err
