"""A picture's "Model hash" and "Lora hashes" come from the library's hash cache: each file is read
for its hash once, by the first picture or the background pass, never again by later pictures or
later launches (the reads are counted through the store's opener)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.demo import DemoLibrary
from core.generate.generator import Generator
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.library import InspectCache
from core.library.hasher import BackgroundHasher
from core.library.hashes import HashStore
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.session import Placement, PlacementConfig, Session
from core.session.library import Library
from tests.core.library.test_hashes import CountingOpener
from tests.fixtures.demo_copy import DemoAt

SETTINGS = ImageSettings("a lighthouse", "", Sampling(seed=3, steps=1, sampler="euler"), 64, 64)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _launch(demo: DemoLibrary, db: Path, opener: CountingOpener) -> tuple[Session, Generator, InspectCache]:
    """What the app does at start: one cache file, the session's library over it."""
    cache = InspectCache(db)
    library = Library(cache)
    library.hashes = HashStore(cache, opener=opener)
    card = PlacementConfig(
        MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0), 6 << 20, 1 << 20
    )
    session = Session(Placement(cpu_device(0), card, cpu_is_device=True), library=library)
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(demo.lora, 0.8, 0.8)
    return session, Generator(session), cache


def _picture(generator: Generator, session: Session, out: Path) -> dict[str, str]:
    result = generator.generate(SETTINGS, Output(out), lambda p: None, session.placement.manager.check)
    p = parse_parameters(read_png_parameters(result.images[0].path))
    return {"model": p.model_hash, "lora": p.loras[0].hash}


def _addnet(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha256(data[8 + int.from_bytes(data[:8], "little") :]).hexdigest()


def test_a_second_picture_and_a_second_launch_read_no_file_for_its_hashes(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    db = tmp_path / "cache.sqlite"
    opener = CountingOpener()
    session, generator, cache = _launch(demo, db, opener)
    first = _picture(generator, session, tmp_path / "1.png")
    assert first == {
        "model": hashlib.sha256(demo.checkpoint.read_bytes()).hexdigest()[:10],
        "lora": _addnet(demo.lora)[:12],
    }
    assert opener.reads == {demo.checkpoint.name: 1, demo.lora.name: 1}
    assert _picture(generator, session, tmp_path / "2.png") == first
    assert opener.total == 2
    cache.close()

    session, generator, cache = _launch(demo, db, opener)  # the app started again
    assert _picture(generator, session, tmp_path / "3.png") == first
    assert opener.total == 2 and cache.hash_hits == 2
    cache.close()


def test_files_hashed_in_the_background_are_not_read_by_the_first_picture(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    opener = CountingOpener()
    session, generator, cache = _launch(demo, tmp_path / "cache.sqlite", opener)
    list(session.library.scan([str(demo.folder)], lambda p: None, lambda: None))
    jobs = [j for j in session.library.hash_jobs() if j.path in (demo.checkpoint, demo.lora)]
    assert len(jobs) == 2
    hasher = BackgroundHasher(session.library.hashes, session.library.hashed)
    try:
        hasher.submit(jobs)
        assert hasher.wait_idle(30)
    finally:
        hasher.stop()
    assert opener.total == 2
    _picture(generator, session, tmp_path / "1.png")
    assert opener.total == 2
    assert session.library.index is not None
    entry = session.library.index.get(demo.checkpoint)
    assert entry is not None and entry.sha256 == hashlib.sha256(demo.checkpoint.read_bytes()).hexdigest()
    cache.close()
