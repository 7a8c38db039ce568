"""The Ray executor on a local cluster of two workers (started once for this module), with the demo's
tiny SD1 checkpoint: a grid, pixel equality with in-process, a worker without a file, a killed
worker, and a cluster that goes away."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("ray")

import contextlib

from app.demo import DemoLibrary
from core.generate.hashes import FileHashes
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.patching.merge import LoraArg
from core.queue import ray_pool
from core.queue.grid import parse_axis
from core.queue.grid_jobs import grid_jobs
from core.queue.job import FileRef, Job
from core.queue.runner import ClusterLost, LocalPool, QueueRunner
from core.queue.store import JobStore, Totals
from core.queue.worker import Worker
from core.session.snapshots import SessionEvent
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def only_w1(tmp_path_factory: pytest.TempPathFactory, demo: DemoLibrary) -> Path:
    """A LoRA no other worker has (the demo's, halved: other bytes), in a folder only w1 indexes."""
    folder = tmp_path_factory.mktemp("w1-models")
    tensors = load_file(demo.lora)
    save_file({k: v * 0.5 for k, v in tensors.items()}, folder / "renamed-style.safetensors")
    return folder


@pytest.fixture(scope="module")
def pool(only_w1: Path) -> Iterator[ray_pool.RayPool]:
    count = ray_pool.connect("local:2")
    pool = ray_pool.RayPool(count, roots=[[], [only_w1]])
    try:
        yield pool
    finally:
        pool.close()
        ray_pool.shutdown()


def _request(demo: DemoLibrary, steps: int = 2, size: int = 64) -> GenerateRequest:
    return GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a red fox", sampling=Sampling(seed=3, steps=steps), width=size, height=size),
        loras=(LoraArg(demo.lora, 1.0),),
    )


def test_a_grid_on_two_workers_is_bit_identical_to_in_process(
    pool: ray_pool.RayPool, demo: DemoLibrary, tmp_path: Path
) -> None:
    axes = (parse_axis("seed:1,2"), parse_axis("lora-strength:0,1"))
    store = JobStore()
    store.add(grid_jobs(_request(demo), tmp_path / "ray", *axes))
    events: list[tuple[str, SessionEvent]] = []
    QueueRunner(store, pool, on_events=events.extend).run()
    assert {j.state for j in store.jobs()} == {"done"}
    assert {j.worker for j in store.jobs()} == {"w0", "w1"}  # both took cells
    loads = {w for w, e in events if e.kind == "load"}
    assert loads == {"w0", "w1"} and any(e.kind == "phase" for _, e in events)  # their sessions' events
    assert (tmp_path / "ray" / "grid.png").is_file()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' count: CPU sums depend on it
    try:
        local = JobStore()
        local.add(grid_jobs(_request(demo), tmp_path / "local", *axes))
        QueueRunner(local, LocalPool(Worker("local"))).run()
    finally:
        torch.set_num_threads(threads)
    for name in ("x0-y0-z0.png", "x1-y0-z0.png", "x0-y1-z0.png", "x1-y1-z0.png"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


def test_a_job_goes_to_the_worker_that_has_its_file(
    pool: ray_pool.RayPool, demo: DemoLibrary, only_w1: Path, tmp_path: Path
) -> None:
    copy = only_w1 / "renamed-style.safetensors"
    hint = tmp_path / "not-here" / "style.safetensors"  # the client's path, absent on this machine
    ref = FileRef(hint, FileHashes().sha256(copy), copy.stat().st_size)
    base = _request(demo)
    jobs = [
        Job(
            GenerateRequest(base.models, base.image, (LoraArg(hint, 0.5),), output=tmp_path / f"{i}.png"),
            (
                FileRef(
                    demo.checkpoint, FileHashes().sha256(demo.checkpoint), demo.checkpoint.stat().st_size
                ),
                ref,
            ),
        )
        for i in range(2)
    ]
    store = JobStore()
    store.add(jobs)
    QueueRunner(store, pool).run()
    assert [(j.state, j.worker) for j in store.jobs()] == [("done", "w1"), ("done", "w1")]
    assert pool.missing("w0", (ref,)) == [ref] and pool.missing("w1", (ref,)) == []


def test_a_strict_job_on_a_ray_worker_refuses_a_half_matching_lora(
    pool: ray_pool.RayPool, demo: DemoLibrary, tmp_path: Path
) -> None:
    from dataclasses import replace

    from core.queue.job import with_hashes

    tensors = load_file(demo.lora)
    layers, nowhere = "lora_te_text_model_encoder_layers_", "lora_te_text_model_encoder_nowhere_"
    extra = {k.replace(layers, nowhere): v.clone() for k, v in tensors.items()}  # modules naming nothing
    half = tmp_path / "half.safetensors"
    save_file({**tensors, **extra}, half)
    request = replace(_request(demo), loras=(LoraArg(half, 1.0),), strict=True, output=tmp_path / "s.png")
    store = JobStore()
    (jid,) = store.add([with_hashes(request, FileHashes())])
    QueueRunner(store, pool).run()
    refused = store.get(jid)
    assert refused.state == "failed" and not (tmp_path / "s.png").exists()
    assert refused.error.startswith("half.safetensors fits only") and "modules in this model" in refused.error


def test_a_killed_worker_s_job_runs_again_on_the_other(
    pool: ray_pool.RayPool, demo: DemoLibrary, tmp_path: Path
) -> None:
    store = JobStore()
    ids = store.add(grid_jobs(_request(demo, steps=30, size=128), tmp_path / "g", parse_axis("seed:1,2,3")))
    killed: list[int] = []

    def kill_w0_mid_job(totals: Totals) -> None:
        for j in store.jobs("running"):
            if j.worker == "w0" and j.progress > 0.1 and not killed:
                os.kill(pool.pids["w0"], signal.SIGKILL)
                killed.append(j.id)

    QueueRunner(store, pool, on_update=kill_w0_mid_job).run()
    assert killed and pool.workers() == ["w1"]
    assert [j.state for j in store.jobs()] == ["done"] * 3
    again = store.get(killed[0])
    assert again.worker == "w1" and again.attempts == 1  # re-run once, elsewhere
    names = sorted(p.name for p in (tmp_path / "g").iterdir())
    assert names == ["grid.png", "x0-y0-z0.png", "x1-y0-z0.png", "x2-y0-z0.png"]  # each written once
    assert len(ids) == 3


def test_a_cluster_that_goes_away_leaves_the_jobs_queued(
    pool: ray_pool.RayPool, demo: DemoLibrary, tmp_path: Path
) -> None:
    store = JobStore(tmp_path / "queue.sqlite")
    store.add(grid_jobs(_request(demo, steps=30, size=128), tmp_path / "g", parse_axis("seed:1,2")))

    def kill_all(totals: Totals) -> None:
        if store.jobs("running"):  # whatever its progress: the job is the runner's until it ends
            for pid in pool.pids.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    with pytest.raises(ClusterLost, match="2 job"):
        QueueRunner(store, pool, on_update=kill_all).run()
    assert [j.state for j in JobStore(tmp_path / "queue.sqlite").jobs()] == ["queued", "queued"]
    assert not (tmp_path / "g").exists()
