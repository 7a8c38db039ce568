"""Screenshots of every panel and of the whole window after a real session (look at them:
``shots/app/`` at the repository root, or ``$LOADOUT_SHOTS``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from PySide6.QtGui import QImage

from app.demo import DemoLibrary
from app.gui.settings import SettingsDialog
from tests.app.conftest import SHOTS
from tests.app.util import strict

ROOT = Path(__file__).resolve().parents[2]


def _save(widget, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    assert widget.grab().save(str(path)), f"could not write {path}"
    image = QImage(str(path))
    assert image.width() > 150 and image.height() > 80, f"{name}: {image.width()}x{image.height()}"
    return path


def test_screenshots_of_each_panel_and_the_window(qtbot, make_window, demo_library: DemoLibrary) -> None:
    window = make_window(demo_library.folder)
    backend = window.backend
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(demo_library.checkpoint)).isValid(), timeout=30000
    )
    qtbot.waitUntil(lambda: not backend.busy, timeout=30000)
    window.browser.select_path(demo_library.checkpoint)
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        window.load_selected()
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        backend.add_lora(demo_library.lora, 0.8, 0.6)
    sdxl_lora = demo_library.folder / "models/loras/demo-detail-tweaker-sdxl.safetensors"
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        backend.add_lora(sdxl_lora, 0.5, 0.5, True)
    panel = window.testrun_panel
    panel.steps.setValue(3)
    panel.width_.setValue(128)
    panel.height_.setValue(128)
    with strict(qtbot, backend, "started", "run_done", "finished"):
        panel.run_button.click()
    qtbot.wait(400)  # a few plot ticks after the last event

    shots = [_save(window, "window")]
    shots.append(_save(window.centralWidget(), "browser-and-details"))
    shots.append(_save(window.browser, "browser"))
    shots.append(_save(window.details, "details"))
    for key, dock in window.docks.items():
        shots.append(_save(dock, f"panel-{key}"))
    window.browser.select_path(demo_library.folder / "models/checkpoints/damaged-download.safetensors")
    shots.append(_save(window.details, "details-unreadable"))
    window.browser.select_path(demo_library.lora)
    shots.append(_save(window.details, "details-lora"))
    window.apply_settings(replace(window.settings, dark_theme=False))  # the light theme
    qtbot.wait(50)
    shots.append(_save(window, "window-light"))
    window.apply_settings(replace(window.settings, dark_theme=True))
    dialog = SettingsDialog(window.settings, window)
    qtbot.addWidget(dialog)
    dialog.show()
    shots.append(_save(dialog, "settings"))
    dialog.close()
    print("\nscreenshots:\n  " + "\n  ".join(str(p) for p in shots))
    assert all(p.stat().st_size > 2000 for p in shots)


def test_screenshots_with_the_memory_manager_at_work(qtbot, make_window, demo_library: DemoLibrary) -> None:
    from app.backend.placement import Placement
    from tests.app.test_placement import card

    window = make_window(demo_library.folder, placement=Placement(None, card(3)))
    backend = window.backend
    qtbot.waitUntil(lambda: not backend.busy and window.browser.select_path(demo_library.checkpoint))
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        window.load_selected()
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        backend.add_lora(demo_library.lora, 0.8, 0.6)
    with strict(qtbot, backend, "started", "models_changed", "finished"):
        backend.place("main", "diffusion_model")
    panel = window.testrun_panel
    panel.steps.setValue(3)
    with strict(qtbot, backend, "started", "run_done", "finished"):
        panel.run_button.click()
    qtbot.wait(400)
    shots = [_save(window, "placed-window")]
    for key in ("loaded", "memory", "testrun", "lora"):
        shots.append(_save(window.docks[key], f"placed-panel-{key}"))
    dialog = SettingsDialog(window.settings, window)
    qtbot.addWidget(dialog)
    dialog.show()
    shots.append(_save(dialog, "placed-settings"))
    dialog.close()
    print("\nscreenshots:\n  " + "\n  ".join(str(p) for p in shots))


def test_cli_demo_screenshot_exits_0_and_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "demo.png"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "run").mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "--demo", "--screenshot", str(out), "--window-size", "1366x768"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    image = QImage(str(out))
    assert out.stat().st_size > 20000 and (image.width(), image.height()) == (1366, 768)
    assert (tmp_path / "data" / "Loadout" / "demo-library" / "models" / "checkpoints").is_dir()
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "cli-demo.png").write_bytes(out.read_bytes())
