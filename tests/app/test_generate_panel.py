"""The Generate panel as a view: settings out, progress/preview/pictures in, a dropped PNG read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.detect.catalog import generation_defaults
from core.errors import LoadoutError
from core.generate.events import GeneratedImage, GenerateProgress, GenerateResult
from core.generate.parameters import EmbeddingUse, GenerationParameters, LoraUse, format_parameters
from core.generate.png import save_png
from core.generate.request import ImageSettings
from core.sampling import SAMPLERS, SCHEDULERS


def test_generate_emits_the_typed_settings(panel: GeneratePanel, qtbot: QtBot) -> None:
    panel.set_family("sdxl", generation_defaults("sdxl"))
    panel.set_available(True)
    assert (panel.width_.value(), panel.height_.value()) == (1024, 1024)
    qtbot.keyClicks(panel.prompt, "a red fox in snow, (detailed:1.2)")
    panel.negative.setPlainText("blurry")
    panel.seed.setText("18446744073709551615")  # ComfyUI's largest seed
    panel.steps.setValue(12)
    panel.sampler.setCurrentIndex(panel.sampler.findData("dpmpp_2m"))
    panel.scheduler.setCurrentIndex(panel.scheduler.findData("karras"))
    assert panel.settings().clip_skip is None  # "model's own" layer until one is chosen
    panel.clip_skip.setValue(2)
    with qtbot.waitSignal(panel.generate_requested) as sent:
        qtbot.keyClick(panel.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    s: ImageSettings = sent.args[0]
    assert s.prompt == "a red fox in snow, (detailed:1.2)" and s.negative == "blurry"
    assert (s.sampling.seed, s.sampling.steps, s.sampling.sampler, s.sampling.scheduler) == (
        2**64 - 1, 12, "dpmpp_2m", "karras",
    )  # fmt: skip
    assert (s.width, s.height, s.sampling.guidance, s.clip_skip) == (1024, 1024, None, 2)


def test_the_sampler_and_scheduler_lists_are_the_engines(panel: GeneratePanel) -> None:
    samplers = [panel.sampler.itemData(i) for i in range(panel.sampler.count())]
    schedulers = [panel.scheduler.itemData(i) for i in range(panel.scheduler.count())]
    assert samplers == list(SAMPLERS) and schedulers == list(SCHEDULERS)  # nothing the engine refuses
    i = panel.sampler.findData("res_multistep")
    assert panel.sampler.itemData(i, Qt.ItemDataRole.ToolTipRole) == SAMPLERS["res_multistep"].summary
    assert panel.sampler.itemText(panel.sampler.findData("dpm_2_ancestral")) == "dpm_2_ancestral  (DPM2 a)"


def test_a_bad_seed_is_an_error_not_a_request(panel: GeneratePanel, qtbot: QtBot) -> None:
    panel.set_available(True)
    panel.seed.setText("12a")
    with qtbot.waitSignal(panel.error) as err, qtbot.assertNotEmitted(panel.generate_requested):
        panel.generate_button.click()
    assert isinstance(err.args[0], LoadoutError)


def test_flux_dev_offers_guidance_and_flux_defaults(panel: GeneratePanel) -> None:
    panel.set_family("flux-dev", generation_defaults("flux-dev"))
    assert panel.guidance.isVisible() and panel.cfg.value() == 1.0
    assert panel.scheduler.currentData() == "simple"
    assert panel.settings().sampling.guidance == 3.5
    panel.set_family("sd1", generation_defaults("sd1"))
    assert not panel.guidance.isVisible() and (panel.width_.value(), panel.height_.value()) == (512, 512)


def test_progress_preview_and_pictures_are_shown(panel: GeneratePanel, tmp_path: Path) -> None:
    previews: list = []
    results: list = []
    panel.preview_ready.connect(previews.append)
    panel.pictures_ready.connect(results.append)
    panel.set_available(True)
    panel.on_started()
    assert not panel.generate_button.isEnabled()
    preview = np.zeros((8, 8, 3), np.uint8)
    preview[..., 0] = 255
    panel.on_progress(GenerateProgress("sample", 3, 20, preview=preview))
    assert panel.progress.value() == 3 and "Sampling 3/20" in panel.status.text()
    assert len(previews) == 1 and previews[0][4, 4, 0] == 255  # the window's viewer shows it
    params = GenerationParameters(prompt="fox", seed=77, width=16, height=8)
    text = format_parameters(params)
    path = save_png(tmp_path / "00001-77.png", np.full((8, 16, 3), 200, np.uint8), text)
    panel.on_result(GenerateResult((GeneratedImage(path, params, text),), 77, 0.5, {"sample": 1.0}, 0))
    panel.on_finished()
    assert len(results) == 1 and results[0].images[0].path == path
    assert panel.generate_button.isEnabled()
    panel.reuse_seed()
    assert panel.seed.text() == "77"


def test_a_dropped_png_fills_the_fields(panel: GeneratePanel, tmp_path: Path) -> None:
    params = GenerationParameters(
        prompt="castle", negative="fog", steps=31, sampler="euler_ancestral", scheduler="karras", cfg=5.5,
        seed=4242, width=640, height=448, model="dreamshaper", loras=(LoraUse("style", 0.7, 0.7),),
        clip_skip=2, embeddings=(EmbeddingUse("EasyNegative", "0123456789ab"),),
    )  # fmt: skip
    path = save_png(tmp_path / "in.png", np.zeros((4, 4, 3), np.uint8), format_parameters(params))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    panel.dropEvent(event)
    s = panel.settings()
    assert (s.prompt, s.negative, s.sampling.steps, s.sampling.sampler, s.sampling.scheduler) == (
        "castle", "fog", 31, "euler_ancestral", "karras",
    )  # fmt: skip
    assert (s.sampling.cfg, s.sampling.seed, s.width, s.height) == (5.5, 4242, 640, 448)
    assert "style 0.7" in panel.status.text() and "embeddings: EasyNegative" in panel.status.text()
    assert s.clip_skip == 2


def test_a_dropped_file_without_parameters_is_reported(
    panel: GeneratePanel, qtbot: QtBot, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"nope")
    with qtbot.waitSignal(panel.error) as err:
        panel.read_picture(junk)
    assert "not an image" in err.args[0].message


@pytest.mark.parametrize("family", ["z-image", "lumina2"])
def test_a_new_familys_usual_settings_come_from_its_record(panel: GeneratePanel, family: str) -> None:
    """Z-Image and Lumina 2 load with their record's sampler, scheduler, steps, CFG and sizes (the
    sampler was left as it was: euler where ComfyUI's templates use res_multistep)."""
    defaults = generation_defaults(family)
    assert defaults.sampler is not None and defaults.steps is not None  # the record has them
    panel.sampler.setCurrentIndex(panel.sampler.findData("euler"))
    panel.set_family(family, defaults)
    assert panel.sampler.currentData() == defaults.sampler
    assert panel.scheduler.currentData() == defaults.scheduler
    assert panel.steps.value() == defaults.steps and panel.cfg.value() == defaults.cfg
    assert (panel.width_.value(), panel.height_.value()) == defaults.sizes[0]
    panel.set_family("sd1", generation_defaults("sd1"))  # a family with no usual sampler keeps it
    assert panel.sampler.currentData() == defaults.sampler
