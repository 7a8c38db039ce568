"""Start the Qt application: the composition root that builds session, backend, monitor and window."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile
from pathlib import Path

from core.memory.policy import MemorySettings, VramState
from core.session import Loaders, Placement, PlacementConfig, Session
from core.version import cache_version

#: The demo without a GPU: a simulated 4 MiB card (nothing kept free, 1 MiB for activations) on the
#: CPU. The demo's text encoder (82 MiB, its CLIP vocabulary table included) only partly fits, so
#: Load to GPU shows a partial load and streaming; generating swaps the text encoder, diffusion
#: model (2 MiB) and VAE through it in turn: the memory manager can be watched at work anywhere.
DEMO_CARD = PlacementConfig(
    MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0),
    simulate_bytes=4 * 2**20,
    inference_bytes=1 * 2**20,
)


def default_cache_path() -> Path:
    from PySide6.QtCore import QStandardPaths

    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericCacheLocation)
    return Path(base or Path.home() / ".cache") / "Loadout" / "inspect-cache.sqlite"


def build_window(
    *,
    store: object | None = None,
    cache_path: Path | None = None,
    session_folders: tuple[str, ...] = (),
    loaders: Loaders | None = None,
    include_own_folder: bool = True,
    monitor: object | None = None,
    placement: object | None = None,
    demo: bool = False,
    output_folder: Path | None = None,
):  # type: ignore[no-untyped-def]
    """The main window with its own session and backend thread (a QApplication must exist).

    ``cache_path`` None keeps the inspect cache in memory (tests); the app passes its per-user file.
    ``placement`` (tests) replaces the discovered device; ``demo`` without a GPU simulates a tiny card.
    """
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.backend.backend import Backend
    from app.backend.monitor import MemoryMonitor
    from app.gui import wheel_guard
    from app.gui.compat import guard_none_refcount
    from app.gui.main_window import MainWindow
    from app.gui.settings import AppSettings
    from app.gui.theme import apply_theme
    from core.library import InspectCache
    from core.session.library import Library

    guard_none_refcount()
    app = QApplication.instance()
    settings_store = store if isinstance(store, QSettings) else QSettings()
    if isinstance(app, QApplication):
        apply_theme(app, AppSettings.load(settings_store).dark_theme)
        wheel_guard.install(app)  # the wheel scrolls panels; it changes only a focused control
    if cache_path is not None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
    if not isinstance(placement, Placement):
        placement = Placement.discover(AppSettings.load(settings_store).placement_config())
        if demo and placement.accelerator is None:
            placement = placement.reconfigured(DEMO_CARD)
    cache = InspectCache(cache_path, engine_version=cache_version())
    session = Session(placement, library=Library(cache), loaders=loaders)
    backend = Backend(session)
    mon = monitor if isinstance(monitor, MemoryMonitor) else MemoryMonitor.watching(backend.placement.memory)
    if demo and output_folder is None:  # the demo's pictures stay with the demo library
        from app.demo import default_demo_dir

        output_folder = default_demo_dir() / "outputs"
    window = MainWindow(
        backend, mon, settings_store, session_folders=session_folders, include_own_folder=include_own_folder,
        output_folder=output_folder,
    )  # fmt: skip
    backend.setParent(window)
    settle_heap()
    return window


def settle_heap() -> None:
    """Move everything alive after start-up (torch, Qt wrappers, widgets: ~10^6 objects) out of the
    garbage collector's reach. Otherwise a full collection, which can start on either thread while
    it allocates, walks them all holding the GIL for 100+ ms and the window stutters."""
    gc.collect()
    gc.freeze()


def _leave_a_core_for_the_window() -> None:
    """The engine's math uses all cores but one: the GUI thread always finds a free core."""
    import torch

    cores = os.cpu_count() or 2
    torch.set_num_threads(max(1, min(torch.get_num_threads(), cores - 1)))


def _application():  # type: ignore[no-untyped-def]
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("Loadout")
    app.setOrganizationName("Loadout")
    app.setApplicationDisplayName("Loadout")
    app.setDesktopFileName("loadout")  # Wayland matches the window to loadout.desktop (icon, grouping)
    return app


def run_gui(
    *,
    demo: bool = False,
    screenshot: str | None = None,
    demo_folder: str | None = None,
    window_size: tuple[int, int] | None = None,
    extra_folder: str | None = None,
    first_launch: bool = False,
) -> int:
    if (
        screenshot
        and sys.platform.startswith("linux")
        and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    ):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # a smoke test on a machine without a screen
    from app.gui.compat import guard_none_refcount
    from app.gui.demo_flow import DemoFlow
    from app.gui.stop_signals import StopSignals

    guard_none_refcount()
    _leave_a_core_for_the_window()
    app = _application()
    with contextlib.ExitStack() as scope:
        # from here SIGTERM/SIGINT/SIGHUP (a log-out, kill, Ctrl-C) close the window via the loop
        stops = scope.enter_context(StopSignals(lambda: _close(app)))
        window = _demo_window(scope, extra_folder) if demo else _user_window()
        if window_size is not None:
            window.resize(*window_size)  # before show: the default layout is arranged for this size
        window.show()
        if window_size is not None:
            window.resize(*window_size)  # and after: a window manager or the offscreen screen may differ
        flow = None
        if demo:
            flow = DemoFlow(window, screenshot=screenshot, folder=demo_folder, extra=extra_folder)
            flow.first_launch = first_launch
            flow.start()
        code = int(app.exec())
        if window.backend.thread.isRunning():
            window.close()
        if flow is not None and flow.exit_code is not None:
            code = flow.exit_code
        code = stops.exit_code(code)
    return code


def _demo_window(scope: contextlib.ExitStack, extra_folder: str | None):  # type: ignore[no-untyped-def]
    """The demo session's window: it neither reads nor changes the user's folders and settings."""
    from PySide6.QtCore import QSettings

    tmp = scope.enter_context(tempfile.TemporaryDirectory(prefix="loadout-demo-"))
    store = QSettings(str(Path(tmp) / "demo.ini"), QSettings.Format.IniFormat)
    extra = (str(Path(extra_folder).resolve()),) if extra_folder else ()
    return build_window(
        store=store, cache_path=None, include_own_folder=False, demo=True, session_folders=extra
    )


def _user_window():  # type: ignore[no-untyped-def]
    """The artist's window on their settings, with the opt-in update check started if it is on."""
    from app.gui.folders import own_models_folder
    from app.gui.settings import AppSettings
    from app.gui.update_notice import start_update_check

    with contextlib.suppress(OSError):  # Loadout's own model folder, listed when it exists
        own_models_folder().mkdir(parents=True, exist_ok=True)
    window = build_window(cache_path=default_cache_path())
    start_update_check(window, AppSettings.load(window.store).check_updates)
    return window


def _close(app: object) -> None:
    """A stop signal's end: every window closed as the artist would close it, then the loop ends."""
    from PySide6.QtWidgets import QApplication

    assert isinstance(app, QApplication)
    app.closeAllWindows()
    app.quit()
