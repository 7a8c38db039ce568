"""A model file changed or truncated under the window: the window survives (app/backend/leases.py).

The window holds a read lease on each file it keeps mapped. Another program truncating the loaded
checkpoint is held by the kernel until the window has unloaded it and let go; the artist reads why.
Where no lease can be taken, the next task is refused in the same words before the mapping is read.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest
from PySide6.QtCore import QEventLoop, QTimer

import core.files.leases as leases
from app.backend.backend import Backend
from app.backend.leases import SigioWakeup
from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.generate.hires_settings import HiresFix
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.session import Session
from tests.app.util import strict

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="read leases are Linux's")

#: another program truncating a file: the open blocks while a read lease on it is broken
TRUNCATE = "import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC); os.write(fd, b'x' * 10)"


def _own_copy(demo: DemoLibrary, tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    return Path(shutil.copy(demo.checkpoint, folder / "fox.safetensors"))


def _load(qtbot, window, path: Path) -> None:
    qtbot.waitUntil(lambda: window.browser.select_path(path) and not window.backend.busy, timeout=30000)
    with strict(qtbot, window.backend, "started", "model_loaded", "finished"):
        window.load_entry(window.browser.current_entry())
    qtbot.waitUntil(lambda: not window.backend.busy, timeout=10000)


def _entry(window, path: Path):  # type: ignore[no-untyped-def]
    index = window.backend.session.library.index
    return index.get(path) if index is not None else None


def test_a_checkpoint_truncated_by_another_program_is_unloaded_and_the_window_lives(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    ckpt = _own_copy(demo_library, tmp_path)
    window = make_window(ckpt.parent)
    _load(qtbot, window, ckpt)
    assert window.backend.leases.files.held() == {ckpt.resolve(): True}  # under a lease
    child = subprocess.Popen([sys.executable, "-c", TRUNCATE, str(ckpt)])
    try:
        qtbot.waitUntil(lambda: child.poll() is not None, timeout=15000)  # held until let go of
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0 and ckpt.stat().st_size == 10  # the truncation went through
    qtbot.waitUntil(lambda: window.message.isVisible() and not window.backend.busy, timeout=10000)
    assert window.message.title == "Model file changed on disk"
    assert (
        "fox.safetensors was changed on disk while loaded; Loadout unloaded it. "
        "Load it again when the other program is done." in window.task_label.text()
    )
    assert window.models == () and window.backend.session.loaded == {}
    assert window.backend.leases.files.held() == {}
    assert not window.generate_panel.generate_button.isEnabled()
    # the library entry is read again: a 10-byte file now
    qtbot.waitUntil(
        lambda: _entry(window, ckpt) is not None and _entry(window, ckpt).size == 10, timeout=10000
    )


def test_without_a_lease_the_next_generation_is_refused_in_words(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "take_lease", lambda fd: False)  # a file system without leases
    ckpt = _own_copy(demo_library, tmp_path)
    window = make_window(ckpt.parent)
    _load(qtbot, window, ckpt)
    assert window.backend.leases.files.held() == {ckpt.resolve(): False}
    panel = window.generate_panel
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=5000)
    os.truncate(ckpt, ckpt.stat().st_size // 3)  # at once: nothing holds it
    panel.prompt.setPlainText("a fox")
    panel.steps.setValue(2)
    with strict(qtbot, window.backend, "started", "failed", "finished") as rec:
        panel.generate_button.click()
    error = rec.first("failed")
    assert error.code == "model_file_changed"
    assert error.message == (
        "fox.safetensors was changed on disk while loaded; Loadout unloaded it. "
        "Load it again when the other program is done."
    )
    qtbot.waitUntil(lambda: window.models == (), timeout=5000)
    assert window.backend.session.loaded == {} and window.message.title == "Model file changed on disk"
    assert not list((tmp_path / "pictures").rglob("*.png"))  # no picture, whole or half


@pytest.mark.parametrize("mode", ["guarded", "unguarded"])
def test_the_window_program_survives_a_truncation_and_died_of_sigbus_without_its_leases(
    demo_library: DemoLibrary, tmp_path: Path, mode: str
) -> None:
    ckpt = _own_copy(demo_library, tmp_path)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen"}
    script = [sys.executable, "-m", "tests.app.window_truncated", str(ckpt), str(tmp_path), mode]
    no_core = partial(resource.setrlimit, resource.RLIMIT_CORE, (0, 0))  # a SIGBUS death dumps no core
    done = subprocess.run(
        script, cwd=root, env=env, capture_output=True, text=True, timeout=120, preexec_fn=no_core
    )
    if mode == "unguarded":  # the window as it was: the generation reads the truncated mapping
        assert done.returncode == -7, done.stdout + done.stderr  # SIGBUS
        return
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["truncated: 0 10", "loaded: 0"], lines
    assert lines[2:] == [
        "model_file_changed: fox.safetensors was changed on disk while loaded; Loadout unloaded it. "
        "Load it again when the other program is done."
    ], lines


class _Listener:
    def __init__(self, loop: QEventLoop) -> None:
        self.loop = loop
        self.calls = 0

    def heard(self) -> None:
        self.calls += 1
        self.loop.quit()


def test_sigio_reaches_python_while_qt_sleeps(qapp) -> None:
    """Signals reach Python only between bytecodes of the main thread: the wakeup pipe makes Qt's
    sleeping event loop run the handler at once (no Python timer runs meanwhile)."""
    wakeup = SigioWakeup.install()
    assert wakeup is not None
    loop = QEventLoop()
    listener = _Listener(loop)
    wakeup.listen(listener.heard)
    QTimer.singleShot(5000, loop, loop.quit)  # the fallback: a C++ slot, no Python runs
    sender = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGIO))
    t0 = time.monotonic()
    sender.start()
    loop.exec()
    sender.join()
    assert listener.calls == 1 and time.monotonic() - t0 < 2.5


def test_a_generation_holds_the_files_it_will_map_before_it_starts(qtbot, tmp_path: Path) -> None:
    """ControlNets, the hires upscale model and the refiner are held from before the job runs (a
    truncation during their first generation is seen), the pictures it only reads are not; what the
    job did not keep mapped is let go of after it."""
    files = {
        n: tmp_path / n
        for n in ("canny.safetensors", "4x.pth", "refiner.safetensors", "hint.png", "init.png")
    }
    for path in files.values():
        path.write_bytes(b"x" * 16)
    settings = ImageSettings(
        "a fox",
        sampling=Sampling(denoise=0.6),
        init_image=files["init.png"],
        controlnets=(ControlNetUse(files["canny.safetensors"], files["hint.png"]),),
        hires=HiresFix(model=files["4x.pth"]),
        refiner=RefinerUse(files["refiner.safetensors"]),
    )
    backend = Backend(Session())
    seen: list[dict[Path, bool]] = []

    def generate(*args: object) -> None:  # the engine, as the job starts it: what is held now
        seen.append(backend.leases.files.held())
        raise LoadoutError("stopped here", code="bad_argument")

    backend.generator.generate = generate  # type: ignore[method-assign]
    try:
        with strict(qtbot, backend, "started", "failed", "finished"):
            backend.generate(settings, tmp_path / "pictures")
        mapped = ("canny.safetensors", "4x.pth", "refiner.safetensors")
        assert seen == [{files[n].resolve(): True for n in mapped}]  # each under a lease
        assert backend.leases.files.held() == {}  # nothing was mapped: nothing kept
    finally:
        assert backend.shutdown()
