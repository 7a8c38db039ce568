"""Fixtures for driving the real window offscreen (pytest-qt).

- every test fails if it leaves a QThread running (napari's rule): ``QThread.start`` is wrapped to
  remember each started thread, and after the test (after pytest-qt closed its widgets) any that
  still runs is stopped and reported;
- ``demo_library``: the app's generated demo library (tiny real SD1 checkpoint + LoRA, sparse
  full-size files), made once per session;
- ``real_layout_folder``: a ComfyUI-style folder of sparse real-layout files from the test fixtures,
  a damaged file and a few hundred LoRAs;
- ``make_window``: the real main window with its own backend thread, an in-memory inspect cache,
  a throwaway QSettings file and no per-user folders;
- ``panel``: the Generate panel alone, shown at 900 x 700 (a file may define its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QSettings, QThread
from pytestqt.qtbot import QtBot

from app.backend.monitor import MemoryMonitor
from app.backend.placement import Placement
from app.demo import DemoLibrary
from app.gui.compat import guard_none_refcount
from app.gui.generate_panel import GeneratePanel
from app.gui.launch import build_window
from app.gui.main_window import MainWindow
from core.session import Loaders
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.layouts_diffusion import flux, sdxl_checkpoint
from tests.fixtures.layouts_lora import clip_layers, lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse

guard_none_refcount()  # before pytest-qt's own Qt calls (see app/gui/compat.py)

SHOTS = Path(os.environ.get("LOADOUT_SHOTS", Path(__file__).resolve().parents[2] / "shots" / "app"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A Qt warning (a timer stopped from the wrong thread, a widget touched off the GUI thread...)
    fails the test; the offscreen platform's size-hint notice is the one expected message."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            item.add_marker(pytest.mark.qt_log_ignore("propagateSizeHints", "does not support raise"))


def running_threads(threads: list[QThread]) -> list[QThread]:
    """The threads of ``threads`` whose C++ object still exists and still runs."""
    return [t for t in threads if shiboken6.isValid(t) and t.isRunning()]


@pytest.fixture(autouse=True)
def no_dangling_qthreads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[QThread]]:
    started: list[QThread] = []
    original = QThread.start

    def start(self: QThread, *args: object) -> None:
        started.append(self)
        original(self, *args)

    monkeypatch.setattr(QThread, "start", start)
    yield started
    left = running_threads(started)
    names = [t.objectName() or type(t).__name__ for t in left]
    for thread in left:
        thread.quit()
        thread.wait(5000)
    if left:
        pytest.fail(f"the test left {len(left)} QThread(s) running: {names}")


@pytest.fixture
def panel(qtbot: QtBot) -> GeneratePanel:
    p = GeneratePanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    return p


@pytest.fixture(scope="session")
def demo_library(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo-library"))


LORA_COUNT = 240


@pytest.fixture(scope="session")
def real_layout_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``models/{checkpoints,diffusion_models,loras}``: full-size headers, no data on disk."""
    root = tmp_path_factory.mktemp("comfy")
    m = root / "models"
    write_sparse(m / "checkpoints" / "sd_xl_base_1.0.safetensors", sdxl_checkpoint())
    write_sparse(m / "diffusion_models" / "flux1-dev.safetensors", flux("dev"), dtype="BF16")
    layers = unet_attention_layers("sd1", "original") + clip_layers(768, 12, "te1")
    style = lora_layout(layers, "kohya", rank=8, single_te=True)
    meta = {"ss_network_module": "networks.lora", "modelspec.trigger_phrase": "watercolor"}
    write_sparse(m / "loras" / "watercolor-sd15.safetensors", style, metadata=meta)
    small = lora_layout(unet_attention_layers("sd1", "original")[:4], "kohya", rank=4)
    for i in range(LORA_COUNT):
        write_sparse(m / "loras" / "many" / f"style_{i:03d}.safetensors", small)
    (m / "checkpoints" / "half-download.safetensors").write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a":')
    (root / "custom_nodes").mkdir()
    return root


@pytest.fixture
def store(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


WindowFactory = Callable[..., MainWindow]


@pytest.fixture
def make_window(qtbot, store: QSettings, tmp_path: Path) -> Iterator[WindowFactory]:
    windows: list[MainWindow] = []

    def make(
        *folders: Path | str,
        loaders: Loaders | None = None,
        monitor: MemoryMonitor | None = None,
        placement: Placement | None = None,
    ) -> MainWindow:
        placement = placement if placement is not None else Placement(None)
        window = build_window(
            store=store,
            cache_path=None,
            session_folders=tuple(str(f) for f in folders),
            loaders=loaders,
            include_own_folder=False,
            monitor=monitor or MemoryMonitor.watching(placement.memory_figures()),
            placement=placement,
            output_folder=tmp_path / "pictures",
        )
        qtbot.addWidget(window)
        window.resize(1500, 940)  # the offscreen screen is 800 x 800; a desktop-sized window
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        if shiboken6.isValid(window):
            window.close()
            assert not window.backend.thread.isRunning(), "closing the window must end the worker thread"
