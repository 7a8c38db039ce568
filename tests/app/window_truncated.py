"""Run as a program by tests/app/test_file_leases.py: the window (offscreen) loads a checkpoint,
generates a picture, another program truncates the file, then the window generates again. Prints
what the window said, one line each; exit 0. ``unguarded`` runs the window as it was before its
leases (no lease, no check): the generation then reads the truncated mapping and the process dies
of SIGBUS (-7).

argv: checkpoint, work folder, "guarded" | "unguarded"."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings, QTimer
from PySide6.QtWidgets import QApplication

import app.backend.leases as window_leases
import core.files.leases as leases
from app.backend.placement import Placement
from app.gui.launch import build_window

TRUNCATE = "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC); os.write(fd, b'x' * 10)"


def run_until(done: Callable[[], bool], limit: float = 30) -> None:
    """Qt's event loop until ``done()`` (looked at every 50 ms)."""
    loop = QEventLoop()
    timer = QTimer()
    timer.timeout.connect(lambda: loop.quit() if done() else None)
    timer.start(50)
    end = time.monotonic() + limit
    while not done() and time.monotonic() < end:
        loop.exec()
    timer.stop()


def main(ckpt: Path, work: Path, mode: str) -> int:
    if mode == "unguarded":
        leases.take_lease = lambda fd: False  # type: ignore[assignment]
        window_leases.WindowLeases.guarded = lambda self, job, path, maps=(): job  # type: ignore[method-assign,assignment]
    app = QApplication([])
    store = QSettings(str(work / "settings.ini"), QSettings.Format.IniFormat)
    window = build_window(
        store=store, cache_path=None, session_folders=(str(ckpt.parent),), include_own_folder=False,
        placement=Placement(None), output_folder=work / "pictures",
    )  # fmt: skip
    backend = window.backend
    said: list[str] = []
    backend.failed.connect(lambda e: said.append(f"{e.code}: {e.message}"))
    run_until(lambda: window.browser.select_path(ckpt) and not backend.busy)
    window.load_entry(window.browser.current_entry())
    run_until(lambda: bool(window.models) and not backend.busy)
    panel = window.generate_panel
    panel.prompt.setPlainText("a fox")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)  # custom: a small picture
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    panel.generate_button.click()  # a first picture: the model's pages are read, its header known
    run_until(lambda: not backend.busy)
    child = subprocess.Popen([sys.executable, "-c", TRUNCATE, str(ckpt)])
    run_until(lambda: child.poll() is not None and not backend.busy)
    print(f"truncated: {child.returncode} {ckpt.stat().st_size}", flush=True)
    print(f"loaded: {len(window.models)}", flush=True)
    if panel.generate_button.isEnabled():
        panel.generate_button.click()
        run_until(lambda: not backend.busy)
    for line in said:
        print(line, flush=True)
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
