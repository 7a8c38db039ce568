"""The Generate panel's hires-fix row: off by default, its fields become the request's HiresFix, and a
dropped picture made with a hires fix turns it on with the picture's values (and off again for one
made without)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.gui.generate_panel import GeneratePanel
from app.gui.workflow_hires import MODEL
from core.generate.hires_settings import HiresFix
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png


def _drop(panel: GeneratePanel, path: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    panel.dropEvent(
        QDropEvent(
            QPointF(5, 5),
            Qt.DropAction.CopyAction,
            mime,
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
        )
    )


def test_the_hires_row_is_off_until_turned_on_and_then_asks_for_its_values(panel: GeneratePanel) -> None:
    assert panel.settings().hires is None
    h = panel.hires
    h.enabled.setChecked(True)
    h.scale.setValue(1.5)
    h.denoise.setValue(0.35)
    h.steps.setValue(12)
    h.upscaler.setCurrentIndex(h.upscaler.findData("bislerp"))
    assert not h.model_path.isEnabled()
    assert panel.settings().hires == HiresFix(1.5, 0.35, 12, "bislerp")
    h.upscaler.setCurrentIndex(h.upscaler.findData(MODEL))
    assert h.model_path.isEnabled()
    h.model_path.setText("/models/upscale_models/4x-UltraSharp.pth")
    assert panel.settings().hires == HiresFix(
        1.5, 0.35, 12, model=Path("/models/upscale_models/4x-UltraSharp.pth")
    )


def test_a_dropped_hires_picture_turns_the_fix_on_with_its_values(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    made = GenerationParameters("castle", steps=20, seed=1, width=512, height=512,
                                hires=HiresFix(2.0, 0.45, 8, "bicubic"))  # fmt: skip
    _drop(panel, save_png(tmp_path / "h.png", np.zeros((4, 4, 3), np.uint8), format_parameters(made)))
    assert panel.settings().hires == HiresFix(2.0, 0.45, 8, "bicubic")
    plain = GenerationParameters("castle", steps=20, seed=1)
    _drop(panel, save_png(tmp_path / "p.png", np.zeros((4, 4, 3), np.uint8), format_parameters(plain)))
    assert panel.settings().hires is None
