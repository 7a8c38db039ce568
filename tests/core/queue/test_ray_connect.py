"""Ray: a bad address is a message after a timeout (Ray itself retries for minutes), the wait ends
on Ctrl-C or SIGTERM, Ray's own output never lands on the command's stdout, and a command's grid
whose cluster went away does not speak of a queue file it does not keep."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.errors import InterruptedByUser, LoadoutError
from tests.fixtures.demo_copy import DemoAt

ray_pool = pytest.importorskip("core.queue.ray_pool")
ROOT = Path(__file__).resolve().parents[3]


def test_a_bad_address_is_unreachable_after_the_timeout_and_a_stop_ends_the_wait() -> None:
    t0 = time.monotonic()
    with pytest.raises(LoadoutError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1") as caught:
        ray_pool.connect("127.0.0.1:1", seconds=3)
    assert caught.value.code == "cluster_unreachable" and time.monotonic() - t0 < 60
    with pytest.raises(InterruptedByUser):
        ray_pool.connect("127.0.0.1:1", seconds=600, stop=lambda: True)


def test_sigterm_ends_a_grid_waiting_for_a_cluster_and_stdout_stays_clean(
    tmp_path: Path, demo_library_at: DemoAt
) -> None:
    demo = demo_library_at(tmp_path / "demo")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "generate", str(demo.checkpoint), "--prompt", "a fox",
         "--steps", "1", "--size", "64x64", "--x", "seed:1,2", "--ray", "127.0.0.1:1",
         "-o", str(tmp_path / "g"), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "", "HOME": str(tmp_path)},
    )  # fmt: skip
    # past the imports, into the wait for the cluster: Ray's first complaint that the address does not
    # answer (5 s into its tries), or at most 25 s (what this test once slept, whatever happened)
    lines: list[str] = []
    waiting = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "GCS" in line:
                waiting.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    waiting.wait(25)
    assert proc.poll() is None, "".join(lines)[-2000:]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    assert proc.stdout is not None
    out, err = proc.stdout.read(), "".join(lines)
    assert proc.returncode == 130, err[-2000:]
    assert out == "", out[:500]  # no Ray line, no half report
    assert "Traceback" not in err
    assert "no picture was written" in err  # the work's own stop, not the one during the imports
