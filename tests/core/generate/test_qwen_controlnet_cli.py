"""InstantX's Qwen-Image ControlNets end to end: files as released (diffusers' names, bf16), detected,
loaded, placed by the manager with the diffusion model, the hint VAE-encoded per stage; the
inpainting net takes the generation's mask. The picture is the same on a small simulated card (the
nets streamed beside the transformer) as with everything in memory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.archs.qwen_image.controlnet import QwenImageControlNet
from core.generate.command import generate_files
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import ControlNetUse
from core.models.qwen_image import QwenImageConfig
from tests.core.generate.reference_qwen_image import blockwise_net
from tests.core.generate.test_generate_qwen_image_cli import _files
from tests.fixtures.controlnets import hint_picture, mask_picture

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


def _controlnet(path: Path, extra: int) -> Path:
    """A net of the model's width (256, two heads), one block, bf16 of a trained net's scale."""
    cfg = QwenImageConfig(dim=256, n_layers=1, n_heads=2, mlp_hidden=1024)
    gen = torch.Generator().manual_seed(9 + extra)
    state = {}
    for key, t in QwenImageControlNet(cfg, extra, device="meta").state_dict().items():
        noise = torch.randn(t.shape, generator=gen)
        scale = 0.1 if t.ndim == 1 else t.shape[-1] ** -0.5
        state[key] = (noise * scale + (1.0 if "norm" in key else 0.0)).to(torch.bfloat16)
    save_file(state, str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen_cn")
    model, text, vae = _files(root)
    init = root / "init.png"
    Image.fromarray(np.full((64, 64, 3), 180, np.uint8)).save(init)
    return {
        "model": model, "text": text, "vae": vae, "init": init,
        "union": _controlnet(root / "Qwen-Image-InstantX-ControlNet-Union.safetensors", 0),
        "inpaint": _controlnet(root / "Qwen-Image-InstantX-ControlNet-Inpainting.safetensors", 1),
        "hint": hint_picture(root / "hint.png", 96, 64), "mask": mask_picture(root / "mask.png"),
    }  # fmt: skip


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_union_controlnet_from_the_command_line_same_on_a_simulated_card(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(out: Path, *extra: str) -> dict[str, object]:
        args = [
            "generate", "--diffusion-model", str(files["model"]), "--text-encoder", str(files["text"]),
            "--vae", str(files["vae"]), "--prompt", "a fox", "--steps", "2", "--cfg", "1",
            "--scheduler", "simple", "--size", "64x64", "--seed", "3",
            "--controlnet", f"{files['union']}:{files['hint']}:0.9", "-o", str(out), "--json", "--quiet",
            *extra,
        ]  # fmt: skip
        assert main(args) == 0
        report: dict[str, object] = json.loads(capsys.readouterr().out)
        return report

    report = run(tmp_path / "whole.png")
    assert "controlnet" in {e["role"] for e in report["events"]}  # type: ignore[attr-defined]
    with Image.open(tmp_path / "whole.png") as im:
        assert "Model: Qwen-Image-InstantX-ControlNet-Union" in im.text["parameters"]
    run(tmp_path / "card.png", "--vram-limit", "40MiB")
    whole = _pixels(tmp_path / "whole.png")
    assert whole.std() > 5 and np.array_equal(_pixels(tmp_path / "card.png"), whole)


def test_inpainting_controlnet_takes_the_mask_same_on_a_simulated_card(
    files: dict[str, Path], tmp_path: Path
) -> None:
    def make(name: str, limit: int | None = None, **image: object) -> np.ndarray:
        settings = ImageSettings(
            "a fox", width=64, height=64, sampling=Sampling(seed=3, steps=2, cfg=1.0, scheduler="simple"),
            init_image=files["init"], **image,  # type: ignore[arg-type]
        )  # fmt: skip
        models = ModelFiles(diffusion_model=files["model"], text_encoders=(files["text"],), vae=files["vae"])
        result = generate_files(GenerateRequest(models, settings, output=tmp_path / name, vram_limit=limit))
        return _pixels(result.images[0].path)

    use = (ControlNetUse(files["inpaint"], files["init"]),)
    whole = make("whole.png", mask_image=files["mask"], controlnets=use)
    assert np.array_equal(make("card.png", 40 << 20, mask_image=files["mask"], controlnets=use), whole)
    plain = make("plain.png", mask_image=files["mask"])
    assert not np.array_equal(whole, plain)  # the net acted on the inpainting


def test_blockwise_controlnet_from_the_command_line(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DiffSynth's blockwise net (ComfyUI's model patch) in the same ``--controlnet`` flag, its range
    and strength as any ControlNet's; written in bf16 as released."""
    state = {k: v.to(torch.bfloat16) for k, v in blockwise_net(256, 2, 0, seed=4).state_dict().items()}
    net = tmp_path / "qwen_image_canny_diffsynth_controlnet.safetensors"
    save_file(state, str(net))

    def run(out: Path, use: str) -> np.ndarray:
        args = [
            "generate", "--diffusion-model", str(files["model"]), "--text-encoder", str(files["text"]),
            "--vae", str(files["vae"]), "--prompt", "a fox", "--steps", "2", "--cfg", "1",
            "--scheduler", "simple", "--size", "64x64", "--seed", "3", "-o", str(out), "--quiet",
            *(("--controlnet", use) if use else ()),
        ]  # fmt: skip
        assert main(args) == 0
        capsys.readouterr()
        return _pixels(out)

    full = run(tmp_path / "full.png", f"{net}:{files['hint']}:1.0")
    plain = run(tmp_path / "plain.png", "")
    late = run(tmp_path / "late.png", f"{net}:{files['hint']}:1.0:0.99:1.0")  # ranged past both steps
    assert np.abs(full.astype(int) - plain).max() > 10 and np.array_equal(late, plain)
