"""The session on its own (no Qt): slots, the placement built complete, one header read per load,
and the library's detection reused while the file is unchanged."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import core.files.safetensors as st_module
import core.loading.loader as loader_module
from core.errors import InterruptedByUser, LoadoutError
from core.memory.policy import MemorySettings, VramState
from core.run.command import RunRequest, run_headless
from core.session import Placement, PlacementConfig, Session, SlotId
from core.session.library import Library
from core.session.testrun import RunConfig
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

NORMAL = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0, min_inference_bytes=0)
CARD = PlacementConfig(NORMAL, simulate_bytes=64 * 2**20, inference_bytes=2**20)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("models")
    return write_tensors(folder / "tiny-sd15.safetensors", checkpoint_tensors("sd1"))


@pytest.fixture
def header_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every safetensors header parse (read_tensor_index and SafetensorsFile both end here)."""
    reads: list[Path] = []
    real = st_module.read_header_from

    def counting(fh, path, file_size, **kw):  # type: ignore[no-untyped-def]
        reads.append(Path(path))
        return real(fh, path, file_size, **kw)

    monkeypatch.setattr(st_module, "read_header_from", counting)
    yield reads


@pytest.fixture
def detections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every detection the loader makes itself."""
    made: list[str] = []
    real = loader_module.detect

    def counting(tensors, metadata, filename):  # type: ignore[no-untyped-def]
        made.append(filename)
        return real(tensors, metadata, filename)

    monkeypatch.setattr(loader_module, "detect", counting)
    yield made


def _load(session: Session, path: Path, kind: str = "checkpoint") -> None:
    session.load(path, kind, lambda p: None, lambda: None)


def test_a_load_reads_the_header_once(ckpt: Path, header_reads: list[Path], detections: list[str]) -> None:
    session = Session()
    _load(session, ckpt)
    assert header_reads == [ckpt] and detections == [ckpt.name]


def test_loadout_run_reads_the_models_header_once(ckpt: Path, header_reads: list[Path]) -> None:
    report = run_headless(RunRequest(ckpt, config=RunConfig(steps=1, width=64, height=64), settings=NORMAL))
    assert header_reads == [ckpt]  # it used to be three: inspect, load's inspect, the mapping
    assert report.events[0].model == "sd1 diffusion model"  # the report names models by family, as before
    assert list(report.to_json())[:3] == ["model", "family", "device"]


def test_the_librarys_detection_is_reused_while_the_file_is_unchanged(
    ckpt: Path, detections: list[str], tmp_path: Path
) -> None:
    session = Session(library=Library())
    assert list(session.library.scan([ckpt.parent], lambda p: None, lambda: None))
    detections.clear()
    _load(session, ckpt)
    assert detections == []  # the scan's detection, the file being as it was scanned
    first = session.models()[0]
    st = ckpt.stat()
    os.utime(ckpt, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: it may have changed
    _load(session, ckpt)
    assert detections == [ckpt.name] and session.models()[0].components == first.components


def test_slots_are_typed_and_a_standalone_part_gets_its_own(ckpt: Path, tmp_path: Path) -> None:
    from core.loading.loader import load_checkpoint

    assert SlotId.parse("main") is SlotId.MAIN and SlotId.parse("vae:vae-sd") == SlotId("vae", "vae-sd")
    for bad in ("", "vae", "main:x", "lora:x"):
        with pytest.raises(LoadoutError) as exc:
            SlotId.parse(bad)
        assert exc.value.code == "not_loaded"
    bundle = load_checkpoint(ckpt)
    assert bundle.vae is not None
    vae_file = write_tensors(tmp_path / "tiny-vae.safetensors", {
        k.removeprefix("first_stage_model."): v.clone()
        for k, v in checkpoint_tensors("sd1").items() if k.startswith("first_stage_model.")
    })  # fmt: skip
    session = Session()
    _load(session, ckpt)
    _load(session, vae_file, "vae")
    assert [m.key for m in session.models()] == ["main", "vae:vae-sd"]
    assert session.loras.stack is not None  # the VAE slot left the main model's stack alone
    session.unload(SlotId("vae", "vae-sd"))
    assert [m.key for m in session.models()] == ["main"]


def test_the_placement_is_built_complete_and_new_settings_keep_the_stop_flag(ckpt: Path) -> None:
    placement = Placement(None, CARD)
    assert placement.manager.interrupt is placement.interrupt  # given at construction, not patched in
    assert placement.active and placement.describe().memory is not None
    session = Session(placement)
    _load(session, ckpt)
    info = session.configure(PlacementConfig(NORMAL, simulate_bytes=32 * 2**20, inference_bytes=2**20))
    assert info.label == "Simulated 32 MiB GPU (on the CPU)" and session.placement is not placement
    assert session.placement.interrupt is placement.interrupt  # the front end's flag still stops it
    assert session.placement.events is placement.events
    session.interrupt.set()
    with pytest.raises(InterruptedByUser):
        session.place(SlotId.MAIN)
    assert not any(c.placed for c in session.models()[0].components)
    assert placement.manager.loaded() == []  # the old manager holds nothing any more
    session.place(SlotId.MAIN, "diffusion_model")
    assert session.placement.placed_bytes() > 0


def _held_ahead(placement: Placement) -> int:
    """Copies fetched ahead for a next forward, over every streamed layer the mover placed."""
    groups = [p.streamed for p in placement.mover._placed.values() if p.streamed is not None]
    return sum(s.staged is not None for g in groups for s in g.layers.values())


def test_a_run_done_or_stopped_keeps_no_copy_fetched_ahead(ckpt: Path) -> None:
    """The wrap-around prefetch (the next forward's first layer, fetched at the end of a forward)
    is freed when the run ends and when it is stopped: the plan does not count it."""
    size = sum(t.nbytes for t in checkpoint_tensors("sd1").values())
    session = Session(Placement(None, PlacementConfig(NORMAL, simulate_bytes=size // 8, inference_bytes=0)))
    _load(session, ckpt)
    seen: list[int] = []
    cfg = RunConfig(steps=3, width=64, height=64, seed=1)
    session.test_run(cfg, lambda done: seen.append(_held_ahead(session.placement)), lambda: None)
    assert max(seen) > 0  # between steps the first layer of the next forward waits, fetched ahead
    assert _held_ahead(session.placement) == 0

    def stop_after_one() -> None:
        if seen and len(seen) >= 4:
            raise InterruptedByUser("stopped")

    with pytest.raises(InterruptedByUser):
        session.test_run(cfg, lambda done: seen.append(_held_ahead(session.placement)), stop_after_one)
    assert _held_ahead(session.placement) == 0
