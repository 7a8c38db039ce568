"""A grid on the session at hand (the LoRA strength sweep is one with a strength axis), on the demo's
tiny SD1 checkpoint and LoRA: real files, real networks, real PNGs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.generate.command import Opened, open_request
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.session_run import Output
from core.patching.merge import LoraArg
from core.queue.grid import axis_of
from core.queue.grid_jobs import grid_jobs
from core.queue.runner import LocalPool, QueueRunner
from core.queue.session_grid import SessionGrid, run_session_grid
from core.queue.store import JobStore
from core.queue.worker import Worker
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _open(demo: DemoLibrary, out: Path, model: float = 0.8, clip: float = 0.6) -> Opened:
    settings = ImageSettings("a red fox", sampling=Sampling(seed=3, steps=2), width=64, height=64)
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint), settings, loras=(LoraArg(demo.lora, model, clip),), output=out
    )
    return open_request(request, lambda p: None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_sweep_cell_is_the_file_a_queued_grid_cell_is(demo: DemoLibrary, tmp_path: Path) -> None:
    """A strength axis made on the session at hand (one LoRA's strength set live cell after cell) and
    the same axis through the queue (a worker of its own, the strength put back after each cell)
    write the same bytes, pixels and text; the stack is put back as it was. (Before the old sweep
    path was removed, this test compared it with the session grid: the same files.)"""
    opened = _open(demo, tmp_path / "fox.png")
    stack = opened.session.loras
    grid = SessionGrid(axis_of("lora-strength", "0, 1.5"))
    here = run_session_grid(opened.generator, opened.image, grid, opened.output, lambda p: None, opened.check)
    cells = [i.path for i in here.images if i.role == "cell"]
    assert [p.name for p in cells] == ["fox-0.png", "fox-1.5.png"]
    assert [i.role for i in here.images] == ["grid", "cell", "cell"]
    assert here.images[0].path.name == "fox-0-grid.png"
    entry = next(iter(stack.stack.entries.values())) if stack.stack is not None else None
    assert entry is not None and (entry.model_strength, entry.clip_strength) == (0.8, 0.6)
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint), opened.image, loras=(LoraArg(demo.lora, 0.8, 0.6),)
    )
    store = JobStore()
    store.add(grid_jobs(request, tmp_path / "queued", grid.x))
    QueueRunner(store, LocalPool(Worker("local"))).run()
    queued = [tmp_path / "queued" / f"x{i}-y0-z0.png" for i in range(2)]
    assert [_sha(p) for p in cells] == [_sha(p) for p in queued]


def test_a_model_only_axis_keeps_the_text_encoder_strength_and_labels_say_which(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    opened = _open(demo, tmp_path / "fox.png")
    gen, image, out, check = opened.generator, opened.image, opened.output, opened.check
    quiet = lambda p: None  # noqa: E731
    only = run_session_grid(
        gen, image, SessionGrid(axis_of("lora-model-strength", "0.4, 1")), out, quiet, check
    )
    out = Output(tmp_path / "both.png")  # not over the first grid's fox-0.4.png
    both = run_session_grid(gen, image, SessionGrid(axis_of("lora-strength", "0.4")), out, quiet, check)
    used = [
        parse_parameters(read_png_parameters(i.path)).loras[0] for i in (*only.images[1:], both.images[1])
    ]
    assert [(u.model_strength, u.clip_strength) for u in used] == [(0.4, 0.6), (1.0, 0.6), (0.4, 0.4)]
    name = demo.lora.stem
    assert [i.label for i in (*only.images[1:], both.images[1])] == [
        f"{name} model 0.4",
        f"{name} model 1",
        f"{name} 0.4",
    ]
    entry = next(iter(opened.session.loras.stack.entries.values())) if opened.session.loras.stack else None
    assert entry is not None and (entry.model_strength, entry.clip_strength) == (0.8, 0.6)  # put back


def test_a_grid_here_refuses_what_it_cannot_do(demo: DemoLibrary, tmp_path: Path) -> None:
    opened = _open(demo, tmp_path / "fox.png")
    ck = SessionGrid(axis_of("checkpoint", f"{demo.checkpoint}"))
    with pytest.raises(LoadoutError, match="checkpoint axis changes the models"):
        run_session_grid(opened.generator, opened.image, ck, opened.output, lambda p: None, opened.check)
    with pytest.raises(LoadoutError, match="not in the stack"):
        grid = SessionGrid(axis_of("lora-strength", "1"), lora="nope")
        run_session_grid(opened.generator, opened.image, grid, opened.output, lambda p: None, opened.check)
