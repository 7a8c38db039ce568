"""A Z-Image picture with a Fun ControlNet file (the 2.1 form: 33 hint channels, refiner control
blocks) through detection, the loaders, the manager and the command: the same picture bit for bit
whether the weights sit in memory or are placed on a small simulated card, and not the picture
without the ControlNet; the CLI takes the file and says it in the PNG; with ``--init`` and
``--mask`` the net takes the picture to inpaint and the mask (its 2.x inpainting inputs), again the
same bits on the small card, with a hint picture and without one (``--controlnet FILE``: ComfyUI's
node with no ``image``), and outpainting hands it the padded picture and its mask; a hint-less net
with nothing to inpaint, or a 1.0 file, is refused. The composition itself is proven against
diffusers in test_parity_zimage_control.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from core.files.writer import write_safetensors
from core.generate.command import generate_files
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import ControlNetUse
from tests.core.generate.reference_nextdit import z_image_reference
from tests.core.generate.reference_zimage_control import control_reference
from tests.core.generate.test_generate_zimage_cli import _files
from tests.fixtures.controlnets import mask_picture

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    folder = tmp_path_factory.mktemp("zimage")
    model, text, ae = _files(folder)
    hf = z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=2560, seed=3)
    cn = control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2)
    state = {k: v.contiguous() for k, v in cn.state_dict().items() if k.startswith("control_")}
    control = write_safetensors(folder / "Z-Image-Turbo-Fun-Controlnet-Union-2.1.safetensors", state)
    first = control_reference(hf, layers=1, in_dim=16, refiner=None, refiners=2)  # 1.0: no inpainting
    state = {k: v.contiguous() for k, v in first.state_dict().items() if k.startswith("control_")}
    write_safetensors(folder / "Z-Image-Turbo-Fun-Controlnet-Union.safetensors", state)
    hint = folder / "edges.png"
    rgb = np.random.default_rng(3).integers(0, 256, (96, 80, 3), dtype=np.uint8)  # another aspect: cropped
    Image.fromarray(rgb).save(hint)
    return model, text, ae, control, hint


def _make(files: tuple[Path, ...], out: Path, strength: float, limit: int | None) -> np.ndarray:
    model, text, ae, control, hint = files
    uses = (ControlNetUse(control, hint, strength),) if strength else ()
    sampling = Sampling(seed=7, steps=3, cfg=1.0, sampler="euler", scheduler="simple")
    settings = ImageSettings("a red fox", sampling=sampling, width=64, height=64, controlnets=uses)
    files_ = ModelFiles(diffusion_model=model, text_encoders=(text,), vae=ae)
    request = GenerateRequest(files_, settings, output=out, vram_limit=limit)
    result = generate_files(request)
    with Image.open(result.images[0].path) as im:
        return np.asarray(im.convert("RGB")).astype(np.int32)


def test_the_controlled_picture_is_the_same_on_any_card(files: tuple[Path, ...], tmp_path: Path) -> None:
    memory = _make(files, tmp_path / "a.png", 0.8, None)
    card = _make(files, tmp_path / "b.png", 0.8, 24 << 20)
    plain = _make(files, tmp_path / "c.png", 0.0, None)
    assert np.array_equal(memory, card)
    assert np.abs(memory - plain).max() > 10


def test_the_command_line_takes_a_fun_controlnet(
    files: tuple[Path, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae, control, hint = files
    out = tmp_path / "fox.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", "a red fox", "--steps", "2", "--cfg", "1", "--size", "64x64", "--seed", "7",
        "--controlnet", f"{control}:{hint}", "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["images"] == [str(out)]
    assert "Z-Image-Turbo-Fun-Controlnet-Union-2.1" in read_png_parameters(out)


def test_the_command_line_inpaints_with_a_fun_controlnet_on_any_card(
    files: tuple[Path, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae, control, hint = files
    init = tmp_path / "init.png"
    Image.fromarray(np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(init)
    mask = mask_picture(tmp_path / "mask.png")

    def run(name: str, *extra: str) -> np.ndarray:
        args = [
            "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
            "--prompt", "a red fox", "--steps", "2", "--cfg", "1", "--size", "64x64", "--seed", "7",
            "--init", str(init), "--mask", str(mask), "--denoise", "1", "-o", str(tmp_path / name), "--quiet",
            *extra,
        ]  # fmt: skip
        assert main(args) == 0, capsys.readouterr().err
        with Image.open(tmp_path / name) as im:
            return np.asarray(im.convert("RGB")).astype(np.int32)

    net = ("--controlnet", f"{control}:{hint}:0.8")
    memory = run("a.png", *net)
    assert np.array_equal(memory, run("b.png", *net, "--vram-limit", "24MiB"))
    assert np.abs(memory - run("c.png")).max() > 10


def test_the_command_line_inpaints_with_a_fun_controlnet_and_no_hint_on_any_card(
    files: tuple[Path, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--controlnet FILE`` alone: ComfyUI's ``ZImageFunControlnet`` with ``inpaint_image`` and
    ``mask`` and no ``image``; the same bits on a small card, not the picture without the net; with
    nothing to inpaint, or a 1.0 file (no inpainting inputs), refused in words before any picture."""
    model, text, ae, control, _ = files
    init = tmp_path / "init.png"
    Image.fromarray(np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(init)
    mask = mask_picture(tmp_path / "mask.png")
    base = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", "a red fox", "--steps", "2", "--cfg", "1", "--size", "64x64", "--seed", "7", "--quiet",
    ]  # fmt: skip
    inpaint = ["--init", str(init), "--mask", str(mask), "--denoise", "1"]

    def run(name: str, *extra: str) -> np.ndarray:
        assert main([*base, *inpaint, "-o", str(tmp_path / name), *extra]) == 0, capsys.readouterr().err
        with Image.open(tmp_path / name) as im:
            return np.asarray(im.convert("RGB")).astype(np.int32)

    memory = run("a.png", "--controlnet", f"{control}::0.8")
    assert np.array_equal(memory, run("b.png", "--controlnet", f"{control}::0.8", "--vram-limit", "24MiB"))
    assert np.abs(memory - run("c.png")).max() > 10
    assert "Z-Image-Turbo-Fun-Controlnet-Union-2.1" in read_png_parameters(tmp_path / "a.png")

    # outpainting: ImagePadForOutpaint's picture and mask wired to the node's inpaint_image and mask
    # with --size 64x64: the first sampler stage follows the padded picture (80x64), not the settings,
    # so the latent-space hint is encoded at the padded size (it was refused before)
    grow = [*base, "--init", str(init), "--outpaint", "0,0,16,0", "--feather", "8"]

    def grown(name: str, *extra: str) -> np.ndarray:
        assert main([*grow, "-o", str(tmp_path / name), *extra]) == 0, capsys.readouterr().err
        with Image.open(tmp_path / name) as im:
            return np.asarray(im.convert("RGB")).astype(np.int32)

    wide = grown("o1.png", "--controlnet", f"{control}::0.8")
    assert wide.shape == (64, 80, 3)
    assert np.array_equal(wide, grown("o2.png", "--controlnet", f"{control}::0.8", "--vram-limit", "24MiB"))
    assert np.abs(wide - grown("o3.png")).max() > 10

    first = control.with_name("Z-Image-Turbo-Fun-Controlnet-Union.safetensors")
    for net, extra, says in (
        (control, [], "the generation inpaints nothing"),
        (first, inpaint, "was given no hint picture"),
    ):
        out = tmp_path / "refused.png"
        assert main([*base, *extra, "--controlnet", str(net), "-o", str(out), "--json"]) != 0
        err = capsys.readouterr().err
        assert says in err and "Give it a hint picture" in err and not out.exists()
