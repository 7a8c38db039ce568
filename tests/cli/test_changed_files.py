"""A model file truncated while a command uses it: a clean error exit and no partial file, never
a SIGBUS death (the read lease of core/files/guard.py, and convert's plain file reads)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from app.demo import DemoLibrary
from core.errors import FileChangedError
from core.files.atomic import is_partial
from core.files.safetensors import SafetensorsFile
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.st_files import write_tensors

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="read leases are Linux's")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _start(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "app.cli", *args]
    return subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)


def _wait_for(proc: subprocess.Popen[bytes], word: bytes, limit: float = 120) -> bytes:
    assert proc.stderr is not None
    seen = b""
    end = time.monotonic() + limit
    while word not in seen and time.monotonic() < end:
        c = proc.stderr.read(1)
        if not c:
            break
        seen += c
    assert word in seen, seen.decode(errors="replace")
    return seen


def _truncate_while_running(proc: subprocess.Popen[bytes], path: Path) -> tuple[int, str]:
    """Truncate ``path`` (from a thread: with a lease held the kernel holds the truncation until the
    command lets go of the file) and wait for the command to end."""
    cut = threading.Thread(target=os.truncate, args=(path, path.stat().st_size // 3))
    cut.start()
    assert proc.stderr is not None
    rest = proc.stderr.read()
    code = proc.wait(timeout=120)
    cut.join(timeout=120)
    return code, rest.decode(errors="replace")


def test_a_checkpoint_truncated_during_sampling_is_a_clear_error(demo: DemoLibrary, tmp_path: Path) -> None:
    ckpt = shutil.copy(demo.checkpoint, tmp_path / "model.safetensors")
    out = tmp_path / "out" / "pic.png"
    proc = _start(
        "generate", str(ckpt), "--prompt", "a fox", "--steps", "3000", "--size", "64x64", "-o", str(out)
    )
    _wait_for(proc, b"sample")
    code, err = _truncate_while_running(proc, Path(ckpt))
    assert code == 2, err  # SIGBUS would be -7
    assert "changed or was truncated while in use" in err and "Traceback" not in err
    assert not out.exists() and not [p for p in tmp_path.rglob("*") if is_partial(p.name)]


def test_an_input_truncated_during_convert_is_a_clear_error_and_leaves_no_partial(tmp_path: Path) -> None:
    src = write_tensors(tmp_path / "big.safetensors", {f"w{i}": torch.ones(1024, 1024) for i in range(32)})
    out = tmp_path / "out" / "big-bf16.safetensors"
    proc = _start("convert", str(src), "-o", str(out), "--dtype", "bf16")
    _wait_for(proc, b"convert 1/")
    code, err = _truncate_while_running(proc, src)
    assert code == 2, err
    assert "changed or was truncated while in use" in err and "Traceback" not in err
    assert not out.exists() and not [p for p in tmp_path.rglob("*") if is_partial(p.name)]


def test_reading_a_tensor_of_a_truncated_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """Where no lease can be had, convert's plain file reads still see the truncation."""
    src = write_tensors(tmp_path / "m.safetensors", {"a": torch.ones(256), "b": torch.ones(256)})
    f = SafetensorsFile(src)
    assert torch.equal(f.read_tensor("a"), torch.ones(256))
    os.truncate(src, src.stat().st_size - 100)
    with pytest.raises(FileChangedError, match="changed or was truncated while in use"):
        f.read_tensor("b")
