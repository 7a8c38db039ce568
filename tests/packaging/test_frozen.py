"""Smoke-run a built frozen app (PyInstaller) the way an artist's machine runs it.

Builds nothing: point ``LOADOUT_FROZEN_APP`` at a binary made by ``packaging/build.py``::

    LOADOUT_FROZEN_APP=dist/Loadout/Loadout pytest tests/packaging/test_frozen.py

(macOS: ``dist/Loadout.app/Contents/MacOS/Loadout``; Windows: ``dist\\Loadout\\Loadout.exe``). It
runs with no Python on PATH, an empty home and Qt's offscreen platform, and checks the demo
screenshot, that the command line works, and that nothing was written next to the binary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FROZEN = os.environ.get("LOADOUT_FROZEN_APP", "")
TINY = "models/checkpoints/loadout-demo-sd15-tiny.safetensors"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not FROZEN,
        reason="no frozen app to run: build one (python3 packaging/build.py) and set "
        "LOADOUT_FROZEN_APP to its binary, e.g. dist/Loadout/Loadout",
    ),
]


def _binary() -> Path:
    path = Path(FROZEN).resolve()
    assert path.is_file(), f"LOADOUT_FROZEN_APP={FROZEN} is not a file"
    return path


def _app_folder(binary: Path) -> Path:
    """What must stay untouched: the .app bundle on macOS, the one-folder app elsewhere."""
    for parent in binary.parents:
        if parent.suffix == ".app":
            return parent
    return binary.parent


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``folder`` (files and folders) with its size and mtime."""
    out = {}
    for path in [folder, *folder.rglob("*")]:
        st = path.lstat()
        out[path.relative_to(folder).as_posix()] = (st.st_size if not path.is_dir() else 0, st.st_mtime_ns)
    return out


def _bare_env(home: Path, tmp: Path) -> dict[str, str]:
    """HOME and the Qt platform only; PATH names no folder, so no Python can be found (Windows
    keeps its system folders, which Windows itself needs)."""
    env = {"HOME": str(home), "QT_QPA_PLATFORM": "offscreen", "TMPDIR": str(tmp)}
    if sys.platform == "win32":
        for key in ("SYSTEMROOT", "WINDIR", "USERPROFILE", "APPDATA", "LOCALAPPDATA"):
            if key in os.environ:
                env[key] = os.environ[key]
        env |= {
            "PATH": os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"), "System32"),
            "TEMP": str(tmp),
        }
    else:
        env["PATH"] = "/nonexistent"
    return env


def _distinct_colors(path: Path) -> int:
    from PySide6.QtGui import QImage

    image = QImage(str(path))
    assert not image.isNull(), f"{path} is not an image Qt can read"
    assert image.width() >= 640 and image.height() >= 400, f"{image.width()}x{image.height()}"
    step_x, step_y = image.width() // 40, image.height() // 40
    return len({image.pixel(x * step_x, y * step_y) for x in range(40) for y in range(40)})


def test_frozen_demo_smoke_writes_only_per_user_files(tmp_path: Path) -> None:
    binary = _binary()
    folder = _app_folder(binary)
    home = tmp_path / "home"
    home.mkdir()
    shot = tmp_path / "shot.png"
    before = _snapshot(folder)

    run = subprocess.run(
        [str(binary), "--demo", "--screenshot", str(shot)],
        env=_bare_env(home, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert shot.is_file() and shot.stat().st_size > 20_000
    assert _distinct_colors(shot) > 20, "the screenshot is nearly one color: an empty window?"
    after = _snapshot(folder)
    assert after == before, {k for k in before.keys() ^ after.keys()} or {
        k for k in before if before[k] != after[k]
    }
    if sys.platform.startswith("linux"):  # elsewhere Qt's per-user folders do not follow HOME
        assert (home / ".local/share/Loadout/demo-library" / TINY).is_file()


def test_frozen_command_line(tmp_path: Path) -> None:
    """``--help`` and ``inspect`` answer from the frozen binary (on Windows: its console twin)."""
    binary = _binary()
    cli = binary.with_name("loadout-cli.exe") if sys.platform == "win32" else binary
    home = tmp_path / "home"
    home.mkdir()
    env = _bare_env(home, tmp_path)
    helped = subprocess.run([str(cli), "--help"], env=env, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "inspect" in helped.stdout, helped.stderr

    from app.demo import ensure_demo_library

    library = ensure_demo_library(tmp_path / "demo")
    inspected = subprocess.run(
        [str(cli), "inspect", str(library.checkpoint)], env=env, capture_output=True, text=True, timeout=120
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "checkpoint" in inspected.stdout and "sd1" in inspected.stdout


def test_frozen_ray_message_is_plain_words(tmp_path: Path) -> None:
    """The bundle carries no Ray: a cluster grid says what to do, never a bug or a traceback."""
    binary = _binary()
    cli = binary.with_name("loadout-cli.exe") if sys.platform == "win32" else binary
    env = _bare_env(tmp_path / "home", tmp_path)
    from tests.fixtures.layouts_diffusion import sd1_checkpoint
    from tests.fixtures.st_files import write_sparse

    checkpoint = write_sparse(tmp_path / "sd1.safetensors", sd1_checkpoint())  # the Ray check comes first
    run = subprocess.run(
        [str(cli), "generate", str(checkpoint), "--prompt", "a fox", "--x", "seed:1,2",
         "--ray", "local:2", "-o", str(tmp_path / "grid")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "This download of Loadout cannot run jobs on a Ray cluster" in run.stderr, run.stderr
    assert "bug" not in run.stderr and "Traceback" not in run.stderr and "ModuleNotFound" not in run.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_frozen_window_ends_on_sigterm(tmp_path: Path) -> None:
    """A log-out's SIGTERM closes the frozen window through its event loop: exit 0, promptly."""
    import signal
    import time

    home = tmp_path / "home"
    home.mkdir()
    env = _bare_env(home, tmp_path)
    window = subprocess.Popen(
        [str(_binary())], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    cache = home / ".cache" / "Loadout" / "inspect-cache.sqlite"
    if sys.platform == "darwin":
        cache = home / "Library" / "Caches" / "Loadout" / "inspect-cache.sqlite"
    try:
        deadline = time.monotonic() + 120
        while not cache.exists() and window.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert window.poll() is None, window.communicate()[0]
        time.sleep(1.0)
        window.send_signal(signal.SIGTERM)
        output, _ = window.communicate(timeout=60)
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    assert window.returncode == 0, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output


def test_frozen_app_bundles_its_release_feed() -> None:
    """Built with --update-feed (as CI does): the update check has a feed to read."""
    folder = _app_folder(_binary())
    found = [p for p in folder.rglob("release.json") if p.parent.name == "app"]
    assert found, "no app/release.json in the bundle (build.py --update-feed)"
    assert "latest.json" in found[0].read_text()
