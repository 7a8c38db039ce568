"""Grids through the queue in-process, on the demo's tiny SD1 checkpoint: real files, real networks."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.errors import InterruptedByUser
from core.generate.command import generate_files
from core.generate.hashes import FileHashes
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.patching.merge import LoraArg
from core.queue.grid import parse_axis
from core.queue.grid_jobs import grid_jobs
from core.queue.job import FileRef, with_hashes
from core.queue.runner import LocalPool, Outcome, QueueRunner
from core.queue.scheduler import pick
from core.queue.store import JobStore
from core.queue.worker import Worker
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _request(demo: DemoLibrary, steps: int = 2) -> GenerateRequest:
    return GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a red fox", sampling=Sampling(seed=3, steps=steps), width=64, height=64),
        loras=(LoraArg(demo.lora, 1.0),),
    )


def test_a_grid_on_the_command_line_writes_cells_grid_and_the_json_contract(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grid"
    code = main([
        "generate", str(demo.checkpoint), "--prompt", "a red fox", "--lora", f"{demo.lora}:1.0",
        "--steps", "2", "--size", "64x64", "--x", "seed:1,2", "--y", "lora-strength:0,1.5", "-o", str(out),
        "--json",
    ])  # fmt: skip
    stdout, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(stdout)
    assert set(report) == {"images", "grids", "cells", "workers"}
    assert report["grids"] == [str(out / "grid.png")]
    assert report["workers"] == {"local": {"jobs": 4, "model_loads": 1}}  # one load for the whole grid
    coords = sorted((c["x"], c["y"], c["z"]) for c in report["cells"])
    assert coords == [(1, 0.0, None), (1, 1.5, None), (2, 0.0, None), (2, 1.5, None)]
    assert all(set(c) == {"x", "y", "z", "image", "worker", "seconds"} for c in report["cells"])
    for c in report["cells"]:
        p = parse_parameters(read_png_parameters(Path(c["image"])))
        assert (p.seed, p.loras[0].model_strength) == (c["x"], c["y"])  # each cell says its parameters
    with Image.open(out / "grid.png") as g:
        assert g.size[0] > 2 * 64 and g.size[1] > 2 * 64  # two by two, labels beside and below
    names = sorted(p.name for p in out.iterdir())
    assert names == ["grid.png", "x0-y0-z0.png", "x0-y1-z0.png", "x1-y0-z0.png", "x1-y1-z0.png"]


def test_a_cell_is_the_picture_a_plain_generate_makes(demo: DemoLibrary, tmp_path: Path) -> None:
    base = _request(demo)
    store = JobStore()
    store.add(grid_jobs(base, tmp_path / "g", parse_axis("seed:3,4"), parse_axis("cfg:5,8")))
    QueueRunner(store, LocalPool(Worker("local"))).run()
    cell = tmp_path / "g" / "x1-y1-z0.png"
    settings = ImageSettings("a red fox", sampling=Sampling(seed=4, steps=2, cfg=8), width=64, height=64)
    plain = generate_files(
        GenerateRequest(base.models, settings, loras=base.loras, output=tmp_path / "p.png")
    )
    with Image.open(cell) as a, Image.open(plain.images[0].path) as b:
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_stop_mid_job_writes_nothing_and_puts_the_job_back(demo: DemoLibrary, tmp_path: Path) -> None:
    store = JobStore()
    ids = store.add(grid_jobs(_request(demo, steps=4), tmp_path / "g", parse_axis("seed:1,2")))
    pool = LocalPool(Worker("local"))
    runner = QueueRunner(store, pool)

    def progress(job_id: int, p: object) -> None:
        if job_id == ids[1] and getattr(p, "phase", "") == "sample" and getattr(p, "step", 0) == 1:
            runner.stop()

    pool.on_progress = progress
    report = runner.run()
    assert report.stopped
    assert [j.state for j in store.jobs()] == ["done", "queued"]
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["x0-y0-z0.png"]  # no grid, no half cell
    pool.on_progress = lambda job_id, p: None
    again = QueueRunner(store, pool).run()  # going on finishes it, and draws the grid
    assert again.finished == [ids[1]] and (tmp_path / "g" / "grid.png").is_file()


def test_interrupt_of_a_command_line_grid_raises_the_stop(demo: DemoLibrary, tmp_path: Path) -> None:
    from core.queue.command import run_grid

    interrupt = threading.Event()
    interrupt.set()
    with pytest.raises(InterruptedByUser):
        run_grid(_request(demo), tmp_path / "g", (parse_axis("seed:1,2"), None, None), interrupt=interrupt)


def test_a_job_whose_file_no_worker_has_fails_with_its_name(demo: DemoLibrary, tmp_path: Path) -> None:
    job = with_hashes(_request(demo), FileHashes())
    gone = FileRef(tmp_path / "elsewhere.safetensors", "00" * 32, 123)
    store = JobStore()
    (jid,) = store.add([job.__class__(job.request, (*job.files, gone))])
    QueueRunner(store, LocalPool(Worker("local"))).run()
    failed = store.get(jid)
    assert failed.state == "failed" and "no worker has elsewhere.safetensors" in failed.error


def test_a_strict_job_refuses_a_half_matching_lora_as_generate_strict_does(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    from dataclasses import replace

    from safetensors.torch import load_file, save_file

    from core.errors import ModelMismatchError

    tensors = load_file(str(demo.lora))
    layers, nowhere = "lora_te_text_model_encoder_layers_", "lora_te_text_model_encoder_nowhere_"
    extra = {k.replace(layers, nowhere): v.clone() for k, v in tensors.items()}  # modules naming nothing
    half = tmp_path / "half.safetensors"
    save_file({**tensors, **extra}, str(half))
    lenient = replace(_request(demo), loras=(LoraArg(half, 1.0),), output=tmp_path / "a.png")
    strict = replace(lenient, strict=True, output=tmp_path / "b.png")
    with pytest.raises(ModelMismatchError) as direct:
        generate_files(strict)
    hashes = FileHashes()
    store = JobStore()
    # lenient first: the worker then holds the half LoRA and must still refuse the strict job
    a, b = store.add([with_hashes(lenient, hashes), with_hashes(strict, hashes)])
    QueueRunner(store, LocalPool(Worker("local", hashes=hashes))).run()
    assert store.get(a).state == "done" and (tmp_path / "a.png").is_file()
    refused = store.get(b)
    assert refused.state == "failed" and refused.error == direct.value.message
    assert "half.safetensors fits only" in refused.error and not (tmp_path / "b.png").exists()


def test_affinity_prefers_held_models_then_models_no_one_holds() -> None:
    a, b, c = (("A",), ()), (("B",), ()), (("C",), ())
    pending = [(1, a), (2, b), (3, c), (4, b)]
    assert pick(b, pending, {a}) == 2  # what it holds
    assert pick(c, [(1, a), (2, b)], {a}) == 2  # A is held by another worker: B
    assert pick(c, [(1, a)], {a}) == 1  # nothing else: A anyway, no worker idles
    assert pick(a, pending, set(), lambda i: i != 1) == 2  # a job it cannot run is left for others


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--y", "seed:1,2"], "need a grid's --x"),
        (["--x", "seed:1,2", "--ray", "local:0"], "not a local cluster size"),
        (["--x", "seed:1,2", "--sweep", "0.5,1"], "cannot be combined"),
        (["--x", "colour:red"], "not an axis"),
    ],
)
def test_grid_arguments_that_cannot_work_are_refused_before_anything_runs(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    args = [
        "generate",
        str(demo.checkpoint),
        "--prompt",
        "x",
        "--lora",
        str(demo.lora),
        "-o",
        str(tmp_path / "g"),
    ]
    assert main([*args, *extra]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_a_picture_that_cannot_be_written_fails_its_job_clearly(demo: DemoLibrary, tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    store = JobStore()
    (jid,) = store.add(grid_jobs(_request(demo), blocked / "grid", parse_axis("seed:1")))
    report = QueueRunner(store, LocalPool(Worker("local"))).run()
    assert report.failed == [jid] and "cannot write" in store.get(jid).error
    assert blocked.read_text() == "not a folder"


class _DyingPool(LocalPool):
    """Workers whose process dies on whatever job they take (the executor's view of an OOM kill)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(Worker("unused"))
        self.alive = list(names)
        self.taken: list[tuple[str, int]] = []

    def workers(self) -> list[str]:
        return list(self.alive)

    def start(self, worker: str, job_id: int, job: object) -> None:
        self.taken.append((worker, job_id))

    def wait(self, timeout: float) -> list[Outcome]:
        out = [Outcome(w, j, lost=True) for w, j in self.taken]
        for w, _ in self.taken:
            self.alive.remove(w)
        self.taken = []
        return out


def test_a_job_that_kills_its_workers_fails_after_three_instead_of_killing_them_all(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    store = JobStore()
    (jid,) = store.add([with_hashes(_request(demo), FileHashes())])
    pool = _DyingPool(["w0", "w1", "w2", "w3", "w4"])
    QueueRunner(store, pool).run()
    assert store.get(jid).state == "failed" and "3 workers were lost" in store.get(jid).error
    assert pool.alive == ["w3", "w4"]
