"""SIGTERM (a log-out, ``kill``, systemd) and SIGINT (Ctrl-C) end the real window process through
Qt's event loop: the window closes as if the artist closed it (its layout is saved, the worker
stopped) and the process exits promptly with a clean status, no traceback. On the old code the
signal became a KeyboardInterrupt inside a Qt slot, printed and swallowed: the window stayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _start_window(home: Path) -> tuple[subprocess.Popen[str], Path]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    (home / "run").mkdir(parents=True, mode=0o700)
    window = subprocess.Popen(
        [sys.executable, "-m", "app.cli"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return window, home / "cache" / "Loadout" / "inspect-cache.sqlite"


def _wait_for(path: Path, process: subprocess.Popen[str], limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the window exited early ({process.returncode}): {process.stdout.read()}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the window never came up")
        time.sleep(0.1)


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_stop_signal_closes_the_window_cleanly(tmp_path: Path, sig: signal.Signals, status: int) -> None:
    window, cache = _start_window(tmp_path)
    try:
        _wait_for(cache, window)  # the window's session is built; the event loop starts next
        time.sleep(1.0)  # let it reach the loop (a signal before it is honoured as well)
        window.send_signal(sig)
        try:
            output, _ = window.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            window.kill()
            output, _ = window.communicate()
            raise AssertionError(f"{sig.name} did not end the window:\n{output}") from None
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    assert window.returncode == status, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    conf = (tmp_path / "config" / "Loadout" / "Loadout.conf").read_text()
    assert "window\\state" in conf or "window/state" in conf or "[window]" in conf, conf  # closeEvent ran
