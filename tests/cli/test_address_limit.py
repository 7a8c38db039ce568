"""A 1 TiB sparse model file given to `convert` (and any reader) in a process whose address space
is limited (`ulimit -v`): refused in words with the limit, nothing read, nothing written (issue 35:
exit 3, "Cannot allocate memory")."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from tests.fixtures.st_files import write_sparse

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 8 << 30  # room for Python and torch, far less than the file


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_a_file_larger_than_the_address_space_limit_is_refused_in_words(tmp_path: Path) -> None:
    huge = write_sparse(tmp_path / "huge.safetensors", {"w": (1 << 19, 1 << 20)})  # 1 TiB of fp16
    assert huge.stat().st_size > 1 << 40 and huge.stat().st_blocks * 512 < 1 << 20  # nothing on disk
    out = tmp_path / "out.safetensors"
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "convert", str(huge), "-o", str(out), "--dtype", "fp16"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=_limited,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "huge.safetensors (1,024.0 GiB) cannot be mapped" in res.stderr
    assert "8.0 GiB" in res.stderr and "ulimit -v" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.safetensors"]
