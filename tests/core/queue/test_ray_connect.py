"""Ray: a bad address is a message after a timeout (Ray itself retries for minutes), the wait ends
on Ctrl-C or SIGTERM, Ray's own output never lands on the command's stdout, and a command's grid
whose cluster went away does not speak of a queue file it does not keep."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import InterruptedByUser, LoadoutError

ray_pool = pytest.importorskip("core.queue.ray_pool")
ROOT = Path(__file__).resolve().parents[3]


def test_a_bad_address_is_unreachable_after_the_timeout_and_a_stop_ends_the_wait() -> None:
    t0 = time.monotonic()
    with pytest.raises(LoadoutError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1") as caught:
        ray_pool.connect("127.0.0.1:1", seconds=3)
    assert caught.value.code == "cluster_unreachable" and time.monotonic() - t0 < 60
    with pytest.raises(InterruptedByUser):
        ray_pool.connect("127.0.0.1:1", seconds=600, stop=lambda: True)


def test_sigterm_ends_a_grid_waiting_for_a_cluster_and_stdout_stays_clean(tmp_path: Path) -> None:
    from app.demo import ensure_demo_library

    demo = ensure_demo_library(tmp_path / "demo")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "generate", str(demo.checkpoint), "--prompt", "a fox",
         "--steps", "1", "--size", "64x64", "--x", "seed:1,2", "--ray", "127.0.0.1:1",
         "-o", str(tmp_path / "g"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "", "HOME": str(tmp_path)},
    )  # fmt: skip
    time.sleep(25)  # past the imports, into the wait for the cluster
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert out == "", out[:500]  # no Ray line, no half report
    assert "Traceback" not in err
