"""Full-file hashes: A1111's numbers, read once per file version, kept in the sqlite cache across
launches (an old cache file opens and keeps its records), and a background pass that can be
paused, cancelled and stopped without blocking its caller."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import BinaryIO

import pytest
import torch

from core.library import InspectCache, LibraryIndex, ModelRoot
from core.library.cache import SCHEMA_VERSION
from core.library.hasher import BackgroundHasher, HashJob, HashProgress, plan_hashes
from core.library.hashes import FileDigest, HashStore, hash_stream, mostly_holes
from core.session.library import Library
from tests.core.library.conftest import CountingInspector, tiny_lora
from tests.fixtures.st_files import write_tensors


class CountingOpener:
    """``open(path, "rb")`` that counts how often each file is opened for hashing."""

    def __init__(self, delay: float = 0.0) -> None:
        self.reads: Counter[str] = Counter()
        self.delay = delay

    def __call__(self, path: Path) -> BinaryIO:
        self.reads[Path(path).name] += 1
        f = open(path, "rb", buffering=0)  # noqa: SIM115 (the caller closes it)
        if self.delay:
            return _Slow(f, self.delay)  # type: ignore[return-value]
        return f

    @property
    def total(self) -> int:
        return sum(self.reads.values())


class _Slow:
    """A file whose every read takes ``delay`` seconds (a slow disk)."""

    def __init__(self, f: BinaryIO, delay: float) -> None:
        self.f, self.delay = f, delay

    def readinto(self, buf: bytearray) -> int:
        time.sleep(self.delay)
        return self.f.readinto(memoryview(buf)[: 64 * 1024])  # type: ignore[attr-defined]

    def fileno(self) -> int:
        return self.f.fileno()

    def __enter__(self) -> _Slow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def _real_lora(path: Path, seed: int = 0) -> Path:
    g = torch.Generator().manual_seed(seed)
    tensors = {f"lora_unet_x{i}.lora_down.weight": torch.randn(4, 64, generator=g) for i in range(3)}
    return write_tensors(path, tensors, metadata={"ss_network_dim": "4"})


def _addnet(path: Path) -> str:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return hashlib.sha256(data[8 + n :]).hexdigest()


@pytest.mark.parametrize("chunk", [3, 8, 11, 4096, 1 << 22])
def test_one_pass_gives_the_file_hash_and_a1111s_lora_hash_at_any_chunk_size(
    tmp_path: Path, chunk: int
) -> None:
    f = _real_lora(tmp_path / "style.safetensors")
    with open(f, "rb") as fh:
        got = hash_stream(fh, addnet=True, chunk=chunk)
    assert got.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    assert got.addnet == _addnet(f) and got.addnet != got.sha256
    assert got.autov2 == got.sha256[:10] and got.lora_hash == got.addnet[:12]
    with open(f, "rb") as fh:
        plain = hash_stream(fh, chunk=chunk)
    assert plain == FileDigest(got.sha256, None) and plain.lora_hash == got.sha256[:12]


def test_a_header_longer_than_the_file_hashes_nothing_after_it_as_a1111(tmp_path: Path) -> None:
    f = tmp_path / "cut.safetensors"
    f.write_bytes((10**6).to_bytes(8, "little") + b'{"a": 1}')
    with open(f, "rb") as fh:
        assert hash_stream(fh, addnet=True).addnet == hashlib.sha256(b"").hexdigest()


def test_a_file_is_read_once_per_version_across_launches(tmp_path: Path) -> None:
    f = _real_lora(tmp_path / "m.safetensors")
    db = tmp_path / "cache.sqlite"
    opener = CountingOpener()
    with InspectCache(db) as cache:
        store = HashStore(cache, opener=opener)
        first = store.digest(f, addnet=True)
        assert store.digest(f) == first and store.digest(f, addnet=True) == first  # memory
    with InspectCache(db) as cache:  # the next launch: a new store over the same file
        store = HashStore(cache, opener=opener)
        assert store.known(f, addnet=True) == first
        assert store.digest(f, addnet=True) == first
        assert cache.hash_hits == 1
    assert opener.total == 1
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new version of the file
    with InspectCache(db) as cache:
        store = HashStore(cache, opener=opener)
        assert store.known(f) is None
        assert store.digest(f) == FileDigest(first.sha256, None)
    assert opener.total == 2


def test_a_plain_hash_is_read_again_once_for_the_lora_hash(tmp_path: Path) -> None:
    f = _real_lora(tmp_path / "m.safetensors")
    opener = CountingOpener()
    store = HashStore(InspectCache(None), opener=opener)
    assert store.digest(f).addnet is None
    assert store.digest(f, addnet=True).addnet == _addnet(f)
    assert store.digest(f, addnet=True).addnet == _addnet(f) and opener.total == 2
    other = tmp_path / "m.ckpt"
    other.write_bytes(b"PK" + bytes(100))
    assert store.digest(other, addnet=True).addnet is None  # A1111: only .safetensors names


def _v1_cache(db: Path, folder: Path) -> None:
    """A cache file exactly as version 1 of the schema wrote it (records only)."""
    with InspectCache(None) as current:
        index = LibraryIndex([ModelRoot(folder, "loras", "folder")], current)
        list(index.scan())
        rows = current._conn.execute("SELECT * FROM records").fetchall()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute(
        "CREATE TABLE records (path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, "
        "sidecars TEXT NOT NULL, record TEXT NOT NULL)"
    )
    conn.execute("INSERT INTO meta VALUES ('engine', '')")
    conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?)", rows)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_a_version_1_cache_opens_keeps_its_records_and_gains_hashes(tmp_path: Path) -> None:
    folder = tmp_path / "loras"
    for i in range(2):
        tiny_lora(folder / f"l{i}.safetensors")
    db = tmp_path / "cache.sqlite"
    _v1_cache(db, folder)
    counting = CountingInspector()
    with InspectCache(db) as cache:
        assert cache.warnings == []
        index = LibraryIndex([ModelRoot(folder, "loras", "folder")], cache, inspect=counting)
        list(index.scan())
        assert counting.total == 0  # the old records were kept
        HashStore(cache).digest(folder / "l0.safetensors")
    assert not (tmp_path / "cache.sqlite.corrupt").exists()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM hashes").fetchone()[0] == 1
    conn.close()
    with InspectCache(db) as cache:  # and the next scan shows the hash on the entry
        index = LibraryIndex([ModelRoot(folder, "loras", "folder")], cache)
        list(index.scan())
        sha = {e.name: e.sha256 for e in index.entries()}
    assert sha["l0.safetensors"] == hashlib.sha256((folder / "l0.safetensors").read_bytes()).hexdigest()
    assert sha["l1.safetensors"] is None


def test_hashes_and_last_used_survive_a_new_engine_version(tmp_path: Path) -> None:
    f = tiny_lora(tmp_path / "loras" / "a.safetensors")
    db = tmp_path / "cache.sqlite"
    with InspectCache(db, engine_version="1") as cache:
        lib = Library(cache)
        list(lib.scan([str(f.parent)], lambda p: None, lambda: None))
        lib.hashes.digest(f)
        (used,) = lib.note_used([f])
        assert used.last_used is not None
    opener = CountingOpener()
    with InspectCache(db, engine_version="2") as cache:
        assert cache.warnings  # records emptied: detection may have changed
        lib = Library(cache)
        lib.hashes = HashStore(cache, opener=opener)
        list(lib.scan([str(f.parent)], lambda p: None, lambda: None))
        (entry,) = lib.index.entries()  # type: ignore[union-attr]
        assert entry.sha256 is not None and entry.last_used == used.last_used
        assert lib.hash_jobs() == []
    assert opener.total == 0


def test_plan_puts_possible_duplicates_first_then_small_files_and_skips_holes(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    big = tiny_lora(folder / "big.safetensors")
    twin_a = folder / "twin_a.bin"
    twin_b = folder / "twin_b.bin"
    twin_a.write_bytes(b"x" * 5000)
    twin_b.write_bytes(b"y" * 5000)
    small = folder / "small.bin"
    small.write_bytes(b"z" * 10)
    hole = folder / "placeholder.safetensors"
    with open(hole, "wb") as fh:
        fh.truncate(64 << 20)
    assert mostly_holes(hole.stat()) and not mostly_holes(big.stat())
    index = LibraryIndex([ModelRoot(folder, None, "folder")], InspectCache(None))
    list(index.scan())
    jobs = plan_hashes(index.entries())
    assert [j.path.name for j in jobs] == ["twin_a.bin", "twin_b.bin", "small.bin", "big.safetensors"]
    assert [j.addnet for j in jobs] == [False, False, False, True]  # big is a LoRA


def _hasher(store: HashStore) -> tuple[BackgroundHasher, dict[str, FileDigest], list[HashProgress]]:
    found: dict[str, FileDigest] = {}
    progress: list[HashProgress] = []
    hasher = BackgroundHasher(store, lambda p, d: found.__setitem__(p.name, d), progress.append)
    return hasher, found, progress


def test_the_background_pass_hashes_each_file_into_the_cache(tmp_path: Path) -> None:
    files = [_real_lora(tmp_path / f"l{i}.safetensors", i) for i in range(3)]
    cache = InspectCache(tmp_path / "c.sqlite")
    hasher, found, progress = _hasher(HashStore(cache))
    try:
        hasher.submit([HashJob(f, addnet=True) for f in files])
        assert hasher.wait_idle(10)
    finally:
        assert hasher.stop()
    assert {n: d.addnet for n, d in found.items()} == {f.name: _addnet(f) for f in files}
    assert progress[-1] == HashProgress(3, 3, None, False)
    assert all(HashStore(cache).known(f, addnet=True) is not None for f in files)
    cache.close()


def test_stop_pause_and_cancel_take_effect_between_chunks_without_blocking(tmp_path: Path) -> None:
    f = tmp_path / "big.bin"
    f.write_bytes(os.urandom(4 << 20))  # 64 reads of 64 KiB at 20 ms each: over a second
    opener = CountingOpener(delay=0.02)
    store = HashStore(InspectCache(None), opener=opener)
    hasher, found, progress = _hasher(store)
    t0 = time.monotonic()
    hasher.submit([HashJob(f)])
    assert time.monotonic() - t0 < 0.1  # submit never waits for the work
    _wait(lambda: opener.total == 1)
    hasher.pause()
    time.sleep(0.1)
    assert hasher.paused and hasher.busy and not found
    if sys.platform.startswith("linux"):  # the hash thread runs at a lower priority than the app
        native = hasher._thread.native_id  # type: ignore[union-attr]
        assert os.getpriority(os.PRIO_PROCESS, native) > os.getpriority(os.PRIO_PROCESS, 0)
    hasher.resume()
    hasher.cancel()  # drops the file in progress: nothing stored
    assert hasher.wait_idle(5) and not found and store.known(f) is None
    assert progress[-1].running is False
    hasher.submit([HashJob(f)])  # the thread serves a new pass after a cancel
    _wait(lambda: opener.total == 2)
    t0 = time.monotonic()
    assert hasher.stop(timeout=5)
    assert time.monotonic() - t0 < 0.5 and not found
    hasher.submit([HashJob(f)])  # a stopped hasher takes no more work
    assert not hasher.busy and opener.total == 2
    assert not any(t.name == "loadout-hasher" and t.is_alive() for t in threading.enumerate())


def _wait(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_an_unreadable_file_is_reported_and_the_pass_goes_on(tmp_path: Path) -> None:
    gone = tmp_path / "gone.bin"
    ok = tmp_path / "ok.bin"
    ok.write_bytes(b"data")
    hasher, found, progress = _hasher(HashStore(InspectCache(None)))
    try:
        hasher.submit([HashJob(gone), HashJob(ok)])
        assert hasher.wait_idle(5)
    finally:
        hasher.stop()
    assert list(found) == ["ok.bin"] and progress[-1].failed == 1
    assert hasher.errors and hasher.errors[0].startswith("gone.bin")


class _Recorder:
    """A file that records the buffer size of every read (and serves zeros)."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.asks: list[int] = []

    def readinto(self, buf: bytearray) -> int:
        self.asks.append(len(buf))
        n = min(len(buf), self.left)
        memoryview(buf)[:n] = bytes(n)
        self.left -= n
        return n


def test_reading_uses_one_fixed_buffer_whatever_the_file_size() -> None:
    f = _Recorder(10 * 1000 + 7)
    got = hash_stream(f, chunk=1000)  # type: ignore[arg-type]
    assert got.sha256 == hashlib.sha256(bytes(10 * 1000 + 7)).hexdigest()
    assert f.asks == [1000] * 12  # 11 reads with data, one at the end
