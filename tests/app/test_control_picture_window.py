"""What the window's control picture and "Keep each picture's own size" make: the real window loads
FLUX.1 Canny [dev], then FLUX.1 [dev] with a control LoRA, then FLUX.1 Kontext [dev] (real-layout
few-layer files, as ``test_generate_flux_control_cli.py`` and ``test_generate_flux_kontext_cli.py``
write them; those prove the CLI against the parts composed by hand and diffusers); the control
picture box appears with the first two and not the third (Generate off until its picture is
given), the reference box with the third; each
picture clicked out of the window is the one ``loadout generate`` makes with the same settings
(``--control-picture PICTURE:canny``, ``--lora``, ``--reference --keep-reference-size``), and a
picture's parameters read back fill the boxes again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from safetensors.torch import save_file

from app.demo import TINY_CLIP
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.loading.architectures import CLIP, FLUX
from core.models.vae import FLUX_LATENT
from tests.app.util import strict
from tests.core.generate.reference import t5_tokenizers, vae_pair
from tests.core.generate.test_generate_flux_control_cli import CONTROL, DEV
from tests.core.generate.test_generate_flux_kontext_cli import KONTEXT
from tests.core.patching.test_lora_flux_control import control_lora
from tests.fixtures.cli_runs import flux_args, generate, pixels
from tests.fixtures.drawn import landscape
from tests.fixtures.tiny_models import TINY_T5, Tiny

pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("control_window")
    out = {name: root / f"{name}.safetensors" for name in ("clip_l", "t5xxl_fp16", "ae")}
    clip = Tiny("clip-l-full-vocabulary", CLIP, "clip-l", TINY_CLIP, seed=22, layout="transformers")
    save_file(clip.file_state(), str(out["clip_l"]))
    save_file(TINY_T5.file_state(), str(out["t5xxl_fp16"]))
    save_file({k: v.contiguous() for k, v in vae_pair(16, FLUX_LATENT, seed=23)[1].state_dict().items()},
              str(out["ae"]))  # fmt: skip
    for name, family, config, seed in (
        ("flux1-canny-dev", "flux-dev", CONTROL, 31), ("flux1-dev", "flux-dev", DEV, 32),
        ("flux1-kontext-dev", "flux-kontext", KONTEXT, 31),
    ):  # fmt: skip
        out[name] = root / f"{name}.safetensors"
        save_file(Tiny(name, FLUX, family, config, seed=seed).file_state(), str(out[name]))
    out["lora"] = root / "flux1-depth-dev-lora.safetensors"
    control_lora(out["lora"], hidden=DEV.hidden_size)
    t5_tokenizers(root / "t5_tokenizer")
    out["tokenizer"] = root / "t5_tokenizer"
    (root / "pictures").mkdir()
    out["photo"] = landscape(root / "pictures" / "house.png", 64, 64)
    out["door"] = landscape(root / "pictures" / "door.png", 84, 52)  # cropped to 80 x 48 for the VAE
    return out


def _load(qtbot, backend, path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    with strict(qtbot, backend, "started", "model_loaded", "finished", timeout=120000):
        backend.load(path, kind)


def _generate(qtbot, window) -> Path:  # type: ignore[no-untyped-def]
    panel = window.generate_panel
    panel.prompt.setPlainText("a house")
    panel.negative.setPlainText("")
    panel.seed.setText("7")
    panel.random_seed.setChecked(False)
    panel.steps.setValue(2)
    panel.sampler.setCurrentIndex(panel.sampler.findData("euler"))
    panel.scheduler.setCurrentIndex(panel.scheduler.findData("simple"))
    panel.size.setCurrentIndex(panel.size.count() - 1)  # custom
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=10000)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=300000) as rec:
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    (image,) = rec.first("generated").images
    return Path(image.path)


def _same_as_cli(f: dict[str, Path], made: Path, model: str, out: Path, *extra: str) -> None:
    args = flux_args(f[model], f["clip_l"], f["t5xxl_fp16"], f["ae"], "a house", 7)  # the window's settings
    cli = generate(args, out, *extra)
    window_rgb = pixels(made)
    assert window_rgb.std() > 1.0 and np.abs(window_rgb - cli.pixels).max() == 0
    window_extra = parse_parameters(read_png_parameters(made)).extra
    for key in ("Control picture", "References", "Reference size"):
        assert window_extra.get(key) == cli.parameters.extra.get(key), key


def test_the_window_control_picture_and_own_size_make_the_cli_pictures(  # type: ignore[no-untyped-def]
    qtbot, make_window, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    window = make_window(tmp_path / "library")
    panel, backend = window.generate_panel, window.backend
    box, refs = panel.control_picture, panel.references
    qtbot.waitUntil(lambda: not backend.busy, timeout=60000)  # the library's first scan
    for name in ("clip_l", "t5xxl_fp16"):
        _load(qtbot, backend, files[name], "text_encoder")
    _load(qtbot, backend, files["ae"], "vae")
    _load(qtbot, backend, files["flux1-canny-dev"], "diffusion_model")
    assert box.isVisible() and "needs a control picture" in box.note.text() and not refs.isVisible()
    button = panel.generate_button  # off until the picture is given: it generates then
    assert not button.isEnabled() and button.toolTip().startswith("The loaded model needs a control picture")
    box.picture.set_path(files["photo"])
    box.pre.set_name("canny")
    made = _generate(qtbot, window)
    _same_as_cli(
        files, made, "flux1-canny-dev", tmp_path / "canny.png", "--control-picture", f"{files['photo']}:canny"
    )
    box.picture.set_path(files["door"])  # another picture, no preprocessor: the PNG brings them back
    box.pre.set_name(None)
    panel.read_picture(made)
    assert (box.picture.path, box.pre.name) == (files["photo"], "canny")

    _load(qtbot, backend, files["flux1-dev"], "diffusion_model")  # takes no control picture
    assert not box.isVisible() and panel.settings().control_picture is None
    box.picture.set_path(None)
    with strict(qtbot, backend, "started", "stack_changed", "finished", timeout=120000):
        backend.add_lora(files["lora"], 0.8, 0.8)
    qtbot.waitUntil(box.isVisible, timeout=10000)
    words = "The control LoRA flux1-depth-dev-lora needs a control picture"
    assert not button.isEnabled() and panel.status.text().startswith(words)
    box.picture.set_path(files["photo"])
    box.pre.set_name("canny")
    assert "control LoRA flux1-depth-dev-lora follows the canny map" in box.note.text()
    made = _generate(qtbot, window)
    _same_as_cli(files, made, "flux1-dev", tmp_path / "lora.png", "--lora", f"{files['lora']}:0.8",
                 "--control-picture", f"{files['photo']}:canny")  # fmt: skip

    _load(qtbot, backend, files["flux1-kontext-dev"], "diffusion_model")  # the stack goes with FLUX.1 [dev]
    qtbot.waitUntil(lambda: refs.isVisible() and not box.isVisible(), timeout=10000)
    refs.slots[0].set_path(files["door"])
    refs.own_size.setChecked(True)
    assert panel.guidance.value() == 2.5  # Kontext's FluxGuidance, as the CLI (FLUX.1 dev's was 3.5)
    made = _generate(qtbot, window)
    own = ("--reference", str(files["door"]), "--keep-reference-size")
    _same_as_cli(files, made, "flux1-kontext-dev", tmp_path / "kontext.png", *own)
    assert parse_parameters(read_png_parameters(made)).extra["Reference size"] == "own"
    refs.own_size.setChecked(False)
    panel.read_picture(made)
    assert refs.own_size.isChecked()
