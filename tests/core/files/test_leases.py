"""core/files/leases.py: the bookkeeping of the files a front end keeps mapped (read leases where
they can be had, sizes and mtimes everywhere), and the generator's list of what is mapped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import core.files.leases as leases
from app.demo import DemoLibrary
from core.files.leases import MappedFiles, unloaded_error
from core.generate.generator import Generator
from core.session import Session
from tests.fixtures.demo_copy import DemoAt

linux = pytest.mark.skipif(sys.platform != "linux", reason="read leases are Linux's")
TRUNCATE = "import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC))"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _file(tmp_path: Path, name: str = "m.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\0" * 4096)
    return path


def test_no_lease_is_taken_where_sigio_would_end_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "sigio_handled", lambda: False)  # SIGIO's default action: terminate
    files = MappedFiles()
    files.hold([_file(tmp_path)])
    assert list(files.held().values()) == [False]


@linux
def test_a_truncation_waits_for_the_lease_and_is_seen_as_breaking(tmp_path: Path) -> None:
    path = _file(tmp_path)
    previous = signal.signal(signal.SIGIO, lambda signum, frame: None)  # the front end's handler
    try:
        _truncate_under_a_lease(path)
    finally:
        signal.signal(signal.SIGIO, previous)


def _truncate_under_a_lease(path: Path) -> None:
    files = MappedFiles()
    files.hold([path, None, path.parent / "missing", path.parent])  # only existing regular files
    assert files.held() == {path.resolve(): True}
    child = subprocess.Popen([sys.executable, "-c", TRUNCATE, str(path)])
    end = time.monotonic() + 10
    while not files.breaking() and time.monotonic() < end:
        time.sleep(0.02)
    assert files.breaking() == [path.resolve()]
    assert child.poll() is None and path.stat().st_size == 4096  # held by the kernel meanwhile
    files.mark(files.breaking())
    files.keep_only([])  # a marked file is kept until its models are unloaded
    assert files.take_marked() == [path.resolve()] and files.take_marked() == []
    files.release([path])
    assert child.wait(timeout=10) == 0 and path.stat().st_size == 0 and files.held() == {}


def test_without_a_lease_a_change_is_seen_by_size_or_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases, "take_lease", lambda fd: False)
    shrunk, rewritten, same = _file(tmp_path, "a"), _file(tmp_path, "b"), _file(tmp_path, "c")
    files = MappedFiles()
    files.hold([shrunk, rewritten, same])
    assert set(files.held().values()) == {False} and files.changed() == []
    os.truncate(shrunk, 100)
    st = rewritten.stat()
    os.utime(rewritten, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten in place, same size
    assert sorted(files.changed()) == [shrunk.resolve(), rewritten.resolve()]
    assert files.take_marked() == sorted([shrunk.resolve(), rewritten.resolve()])
    files.keep_only([same])
    assert list(files.held()) == [same.resolve()]
    files.release_all()
    assert files.held() == {}


def test_the_words_name_each_file_once() -> None:
    one = unloaded_error([Path("/m/a.safetensors")])
    assert one.code == "model_file_changed"
    assert one.message == (
        "a.safetensors was changed on disk while loaded; Loadout unloaded it. "
        "Load it again when the other program is done."
    )
    two = unloaded_error([Path("/m/a.safetensors"), Path("/l/b.safetensors"), Path("/m/a.safetensors")])
    assert two.message.startswith("a.safetensors and b.safetensors were changed on disk while loaded; ")
    assert "unloaded them." in two.message


def test_the_generator_lists_and_unloads_what_is_mapped_from_a_file(demo: DemoLibrary) -> None:
    session = Session()
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(demo.lora, 0.8, 0.8)
    generator = Generator(session)
    assert generator.mapped_files() == {demo.checkpoint.resolve(), demo.lora.resolve()}
    assert generator.unload_files([demo.lora], "changed") == [demo.lora]  # only the LoRA
    assert session.loras.stack is not None and not session.loras.stack.entries and session.loaded
    assert generator.unload_files([demo.checkpoint], "changed") == [demo.checkpoint]
    assert session.loaded == {} and generator.mapped_files() == set()
