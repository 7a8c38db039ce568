"""Settings > Memory's fp8 matmul choice: kept in QSettings, shown by the dialog, and passed on as
the diffusion model's compute override (beside a storage override of the same role), which is
what the session's placement reads when a model loads."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from app.gui.settings import FP8_MATMUL, FP8_MATMUL_HINT, AppSettings, SettingsDialog
from core.memory.policy import DtypeOverride


def _store(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)


def test_fp8_matmul_round_trips_through_qsettings_and_reaches_memory_settings(qtbot, tmp_path: Path) -> None:
    assert AppSettings.load(_store(tmp_path)).fp8_matmul is False
    assert AppSettings().memory_settings().override_for("diffusion_model") is None
    AppSettings(fp8_matmul=True, dtype_overrides={"vae": "fp32"}).save(_store(tmp_path))
    again = AppSettings.load(_store(tmp_path))
    assert again.fp8_matmul is True
    memory = again.memory_settings()
    assert memory.override_for("diffusion_model") == DtypeOverride("diffusion_model", compute="fp8_e4m3fn")
    assert memory.override_for("vae") == DtypeOverride("vae", storage="fp32")
    assert again.placement_config().settings == memory  # what the backend's session is configured with

    dialog = SettingsDialog(again)
    qtbot.addWidget(dialog)
    assert dialog.fp8.isChecked() and dialog.fp8.text() == FP8_MATMUL
    assert "RTX 40xx / H100" in FP8_MATMUL_HINT and "slightly different pictures" in FP8_MATMUL_HINT
    assert dialog.fp8_hint.text() == FP8_MATMUL_HINT and dialog.fp8_hint.wordWrap()
    dialog.dtypes["diffusion_model"].setCurrentIndex(dialog.dtypes["diffusion_model"].findData("bf16"))
    both = dialog.settings().memory_settings().override_for("diffusion_model")
    assert both == DtypeOverride("diffusion_model", storage="bf16", compute="fp8_e4m3fn")
    dialog.fp8.setChecked(False)
    off = dialog.settings()
    assert off.fp8_matmul is False
    assert off.memory_settings().override_for("diffusion_model") == DtypeOverride(
        "diffusion_model", storage="bf16"
    )
    off.save(_store(tmp_path))
    assert AppSettings.load(_store(tmp_path)).fp8_matmul is False


def test_a_damaged_fp8_value_reads_as_off(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.setValue("memory/fp8_matmul", "not json")
    assert AppSettings.load(store).fp8_matmul is False
