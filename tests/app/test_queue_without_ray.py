"""The Queue set to run on a Ray cluster in a Loadout without Ray (the ready-to-run downloads never
carry it): the window says in plain words what to do, as a warning, and the jobs stay queued. On
the old code it said "Something went wrong inside Loadout ... a bug in Loadout
(ModuleNotFoundError: No module named 'ray')"."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

import core.queue
from app.demo import DemoLibrary
from core.queue.cluster_support import INSTALL
from tests.app.test_generate_window import _load
from tests.app.test_queue_panel import _grid_settings


def test_queue_on_a_cluster_without_ray_says_what_to_do(
    qtbot, make_window, demo_library: DemoLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in the download (the Python install's words are tested on the command line)."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as on a machine without it
    monkeypatch.delitem(sys.modules, "core.queue.ray_pool", raising=False)
    monkeypatch.delattr(core.queue, "ray_pool", raising=False)
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as in the PyInstaller bundle
    window = make_window(demo_library.folder)
    window.settings = replace(window.settings, ray_address="local:2")
    queue = window.queue_panel
    _load(qtbot, window, demo_library.checkpoint)
    _grid_settings(window)
    qtbot.keyClicks(queue.axes["x"], "seed:1,2")
    qtbot.mouseClick(queue.queue_button, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(window.backend.failed, timeout=60000):
        qtbot.mouseClick(queue.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.backend.busy, timeout=30000)
    text = window.message.text.text()
    assert window.message.title == "No cluster support in this Loadout" and window.message.level == "warning"
    assert "The jobs stay queued." in text and INSTALL in text
    assert "This download of Loadout cannot run jobs on a Ray cluster" in text
    assert "bug" not in text and "ModuleNotFoundError" not in text
    assert {j.state for j in queue.store.jobs()} == {"queued"}
