"""A Z-Image Turbo picture from the real window, as an artist with a ComfyUI folder makes it:
the diffusion model clicked in the library, its text encoder and VAE loaded with the Generate
panel's one button, the family's usual settings offered (8 steps, CFG 1, res_multistep, simple),
a picture generated; it is the picture `loadout generate` makes with the same settings (the CLI's
is proven against the parts composed by hand in test_generate_zimage_cli.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import Qt

from app.cli import main
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from tests.app.util import strict
from tests.core.generate.test_generate_zimage_cli import _files

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


def _comfy_folder(root: Path) -> tuple[Path, Path, Path]:
    """Comfy-Org's folders: diffusion_models/, text_encoders/, vae/."""
    made = _files(root)
    moved = []
    for path, sub in zip(made, ("diffusion_models", "text_encoders", "vae"), strict=True):
        (root / "models" / sub).mkdir(parents=True, exist_ok=True)
        moved.append(path.rename(root / "models" / sub / path.name))
    return moved[0], moved[1], moved[2]


def test_a_z_image_picture_from_the_window_is_the_cli_picture(qtbot, make_window, tmp_path: Path) -> None:
    model, text, ae = _comfy_folder(tmp_path)
    window = make_window(tmp_path / "models")
    panel, backend = window.generate_panel, window.backend
    qtbot.waitUntil(lambda: window.browser.select_path(model) and not backend.busy, timeout=60000)
    with strict(qtbot, backend, "started", "model_loaded", "finished", timeout=60000):
        window.load_entry(window.browser.current_entry())
    picker = panel.model
    qtbot.waitUntil(lambda: picker.load_parts.isVisible(), timeout=10000)
    assert "qwen3-4b" in picker.needs.text() and "VAE" in picker.needs.text()
    qtbot.mouseClick(picker.load_parts, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not picker.needs.isVisible() and not backend.busy, timeout=120000)
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=10000)
    # the family's usual settings (ComfyUI's Z-Image Turbo template)
    assert (panel.steps.value(), panel.cfg.value()) == (8, 1.0)
    assert (panel.sampler.currentText(), panel.scheduler.currentText()) == ("res_multistep", "simple")
    panel.prompt.setPlainText("a red fox in the snow")
    panel.negative.setPlainText("")
    panel.seed.setText("7")
    panel.steps.setValue(3)
    panel.size.setCurrentIndex(panel.size.count() - 1)  # custom
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    with strict(qtbot, backend, "started", "generated", "finished", timeout=300000) as rec:
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    (image,) = rec.first("generated").images
    p = parse_parameters(read_png_parameters(image.path))
    assert (p.seed, p.steps, p.width, p.height, p.sampler) == (7, 3, 64, 64, "res_multistep")
    assert window.gallery.paths() == [image.path]
    out = tmp_path / "cli.png"
    args = ["generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae)]
    args += ["--prompt", "a red fox in the snow", "--seed", "7", "--steps", "3", "--size", "64x64"]
    args += ["-o", str(out)]
    assert main(args) == 0
    window_rgb = np.asarray(Image.open(image.path).convert("RGB"), np.int32)
    cli_rgb = np.asarray(Image.open(out).convert("RGB"), np.int32)
    assert window_rgb.std() > 1.0  # a picture, not a flat field
    assert np.abs(window_rgb - cli_rgb).max() == 0
