"""The one atomic writer (core/files/atomic.py) and the destination checks (core/files/destination.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.errors import FileAccessError, LoadoutError
from core.files.atomic import AtomicBatch, atomic_file, atomic_write_bytes, is_partial, sweep_stale_partials
from core.files.destination import check_output_file, check_output_folder
from core.files.writer import write_safetensors

ROOT = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if is_partial(p.name))


@pytest.mark.skipif(os.name != "posix", reason="permission bits")
@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_honour_the_umask(tmp_path: Path, mask: int, mode: int) -> None:
    with umask(mask):
        atomic_write_bytes(tmp_path / "a.png", b"png")
        write_safetensors(tmp_path / "m.safetensors", {"w": torch.ones(2)})
    assert (tmp_path / "a.png").stat().st_mode & 0o777 == mode
    assert (tmp_path / "m.safetensors").stat().st_mode & 0o777 == mode


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_no_space_at_any_point_is_the_disk_full_error_and_leaves_nothing(tmp_path: Path, code: int) -> None:
    with pytest.raises(LoadoutError) as err, atomic_file(tmp_path / "out.bin") as fh:
        fh.write(b"some bytes")
        raise OSError(code, os.strerror(code))  # what a write or fsync raises when the disk fills
    assert err.value.code == "disk_full" and "disk is full" in err.value.message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_disk_that_fills_after_the_free_space_check_is_disk_full(tmp_path: Path) -> None:
    """Two writers race on a small disk: the check passed, then the other writer took the space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:

        def other_writer() -> None:
            if not (disk / "filler").exists():
                with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):
                    fh.write(b"\0" * (1 << 20))

        tensors = {f"w{i}": torch.ones(16 * 1024) for i in range(8)}  # 512 KiB: fits when checked
        with pytest.raises(LoadoutError) as err:
            write_safetensors(disk / "m.safetensors", tensors, check=other_writer)
        assert err.value.code == "disk_full"
        assert _partials(disk) == [] and not (disk / "m.safetensors").exists()
    finally:
        subprocess.run(["umount", str(disk)])


def test_an_interrupted_write_leaves_no_partial(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), atomic_file(tmp_path / "out.bin") as fh:
        fh.write(b"half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_batch_is_all_or_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), AtomicBatch() as batch:
        batch.write_bytes(tmp_path / "1.png", b"one")
        batch.write_bytes(tmp_path / "2.png", b"two")
        raise KeyboardInterrupt  # Ctrl-C while the third is encoded
    assert list(tmp_path.iterdir()) == []
    with AtomicBatch() as batch:
        for i in range(3):
            batch.write_bytes(tmp_path / f"{i}.png", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.png", "1.png", "2.png"]


_KILLED_WRITER = """
import sys, time
from core.files.atomic import atomic_file
with atomic_file(sys.argv[1]) as fh:
    fh.write(b"x" * 1000)
    fh.flush()
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_the_partial_of_a_killed_writer_is_swept_by_the_next_write(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path / "big.safetensors")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    (left,) = _partials(tmp_path)
    assert f".{writer.pid}-" in left  # the writer's pid is in the name
    os.utime(tmp_path / left, (time.time() - 10, time.time() - 10))
    assert sweep_stale_partials(tmp_path) == []  # alive and locked: kept
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert _partials(tmp_path) == [left]  # SIGKILL leaves it behind...
    atomic_write_bytes(tmp_path / "other.png", b"png")  # ...and the next write to the folder removes it
    assert _partials(tmp_path) == [] and not (tmp_path / "big.safetensors").exists()


def test_a_fresh_partial_of_a_live_writer_is_never_swept(tmp_path: Path) -> None:
    with atomic_file(tmp_path / "a.bin") as fh:
        fh.write(b"a")
        atomic_write_bytes(tmp_path / "b.bin", b"b")  # sweeps the folder while a.bin is being written
        assert len(_partials(tmp_path)) == 1
    assert (tmp_path / "a.bin").read_bytes() == b"a"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d, "existing folder"),
        (lambda d: Path("/proc/x"), "system folder"),
        (lambda d: Path("/dev/null"), "system folder"),
        (lambda d: (d / "f").write_bytes(b"") or d / "f" / "out.safetensors", "is a file, not a folder"),
    ],
)
def test_bad_output_files_are_refused_before_any_work(tmp_path: Path, make: object, says: str) -> None:
    with pytest.raises(FileAccessError) as err:
        check_output_file(make(tmp_path))  # type: ignore[operator]
    assert err.value.code == "bad_output" and says in err.value.message


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can write anywhere")
def test_an_unwritable_folder_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(FileAccessError, match="cannot be written to"):
        check_output_file(ro / "sub" / "out.png")


def test_good_destinations_pass(tmp_path: Path) -> None:
    new = tmp_path / "new" / "deeper" / "out.png"
    assert check_output_file(new) == new
    (tmp_path / "old.png").write_bytes(b"")
    check_output_file(tmp_path / "old.png")  # replacing a file is fine (atomically)
    check_output_folder(tmp_path)
    with pytest.raises(FileAccessError):
        check_output_folder(tmp_path / "old.png")
