"""Model-affinity scheduling against round-robin on a mixed batch: models loaded per 100 jobs and
total time.

    python -m bench.queue_affinity [--jobs 100] [--workers 2 4] [--models 4] [--real]

Two parts, one JSON object:

* ``measured``: the cost of a model load and of a sampling step, timed on this machine with the real
  in-process :class:`~core.queue.worker.Worker` and the demo's tiny SD1 checkpoint (the first job
  loads; the next one, same models, does not).
* ``simulated``: the real schedulers (:func:`core.queue.scheduler.pick` and
  :func:`~core.queue.scheduler.pick_round_robin`) dispatching a seeded, shuffled batch of jobs over
  ``--models`` checkpoints to N workers, each job costing its steps (and a load when the worker does
  not hold its model). Once with the measured costs, once with full-size figures (``--load-s``,
  ``--step-s``: an SDXL checkpoint read and placed, a 1024² step on a mid-range GPU).
* ``real`` (with ``--real``): one small batch (2 checkpoints, 8 jobs) on a local Ray cluster of two
  workers, both schedulers, loads counted by the workers themselves.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.queue.job import Key
from core.queue.scheduler import pick, pick_round_robin

Picker = Callable[[Key, Sequence[tuple[int, Key]], Collection[Key], Callable[[int], bool]], int | None]


def simulate(
    picker: Picker, jobs: list[tuple[Key, int]], workers: int, load_s: float, step_s: float
) -> dict[str, float]:
    """Event-driven: the earliest free worker asks ``picker`` for a job; returns loads and makespan."""
    pending = list(enumerate(jobs))
    held: list[Key] = [((), ())] * workers
    free_at = [0.0] * workers
    loads = 0
    while pending:
        w = min(range(workers), key=lambda i: free_at[i])
        others = {held[i] for i in range(workers) if i != w}
        job_id = picker(held[w], [(i, k) for i, (k, _) in pending], others, lambda i: True)
        assert job_id is not None
        key, steps = next(j for i, j in pending if i == job_id)
        pending = [(i, j) for i, j in pending if i != job_id]
        cost = steps * step_s
        if key != held[w]:
            loads += 1
            cost += load_s
            held[w] = key
        free_at[w] += cost
    return {"model_loads": loads, "seconds": round(max(free_at), 3)}


def mixed_batch(n: int, models: int, seed: int = 0) -> list[tuple[Key, int]]:
    """``n`` jobs over ``models`` checkpoints, some with a LoRA, 20-30 steps, in shuffled order (several
    people's grids and single pictures interleaved)."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(n):
        m = rng.randrange(models)
        lora = (f"lora{m}",) if rng.random() < 0.5 else ()
        jobs.append((((f"model{m}",), lora), rng.choice((20, 25, 30))))
    return jobs


def measure(steps: int = 4) -> dict[str, float]:
    """Seconds of a model load and of a step, from two jobs on a real worker (tiny demo model)."""
    from app.demo import ensure_demo_library
    from core.generate.hashes import FileHashes
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
    from core.queue.job import with_hashes
    from core.queue.worker import Worker

    with tempfile.TemporaryDirectory() as tmp:
        demo = ensure_demo_library(Path(tmp) / "demo")
        worker = Worker("bench")
        settings = ImageSettings("a fox", sampling=Sampling(steps=steps), width=64, height=64)
        job = with_hashes(GenerateRequest(ModelFiles(checkpoint=demo.checkpoint), settings), FileHashes())
        t0 = time.perf_counter()
        worker.run(job)
        cold = time.perf_counter() - t0
        warm = min(_timed(worker.run, job) for _ in range(3))
        more = replace(
            job, request=replace(job.request, image=replace(settings, sampling=Sampling(steps=2 * steps)))
        )
        longer = min(_timed(worker.run, more) for _ in range(2))
    step = max(1e-4, (longer - warm) / steps)
    return {"load_s": round(max(0.0, cold - warm), 4), "step_s": round(step, 4), "job_s_warm": round(warm, 4)}


def _timed(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def real_run() -> dict[str, Any]:
    """8 jobs over 2 checkpoints, shuffled, on a local Ray cluster of 2 workers, for each scheduler."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from app.demo import ensure_demo_library
    from core.generate.hashes import FileHashes
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
    from core.queue import ray_pool
    from core.queue.job import with_hashes
    from core.queue.runner import QueueRunner
    from core.queue.store import JobStore

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        demo = ensure_demo_library(Path(tmp) / "demo")
        with safe_open(demo.checkpoint, "pt") as f:
            meta = f.metadata() or {}
        other = Path(tmp) / "other-checkpoint.safetensors"
        save_file(load_file(demo.checkpoint), other, metadata={**meta, "bench.copy": "b"})  # other bytes
        rng = random.Random(1)
        order = [demo.checkpoint, other] * 4
        rng.shuffle(order)
        hashes = FileHashes()
        count = ray_pool.connect("local:2")
        try:
            for name, picker in (("round_robin", pick_round_robin), ("affinity", pick)):
                pool = ray_pool.RayPool(count)
                store = JobStore()
                jobs = []
                for i, ck in enumerate(order):
                    settings = ImageSettings("a fox", sampling=Sampling(seed=i, steps=4), width=64, height=64)
                    path = Path(tmp) / name / f"{i}.png"
                    request = GenerateRequest(ModelFiles(checkpoint=ck), settings, output=path)
                    jobs.append(with_hashes(request, hashes))
                store.add(jobs)
                t0 = time.perf_counter()
                QueueRunner(store, pool, picker=picker).run()
                seconds = time.perf_counter() - t0
                stats = pool.stats()
                out[name] = {
                    "seconds": round(seconds, 3),
                    "model_loads": sum(s["model_loads"] for s in stats.values()),
                    "workers": stats,
                }
                pool.close()
        finally:
            ray_pool.shutdown()
    out["loads_ratio_rr_over_affinity"] = round(
        out["round_robin"]["model_loads"] / max(1, out["affinity"]["model_loads"]), 2
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--load-s", type=float, default=8.0, help="full-size scenario: one checkpoint load")
    ap.add_argument("--step-s", type=float, default=0.15, help="full-size scenario: one sampling step")
    ap.add_argument("--real", action="store_true", help="also a small real batch on a local Ray cluster")
    args = ap.parse_args()
    measured = measure()
    jobs = mixed_batch(args.jobs, args.models)
    simulated: dict[str, Any] = {}
    for label, load_s, step_s in (
        ("measured_costs", measured["load_s"], measured["step_s"]),
        ("full_size_costs", args.load_s, args.step_s),
    ):
        for n in args.workers:
            rr = simulate(pick_round_robin, jobs, n, load_s, step_s)
            aff = simulate(pick, jobs, n, load_s, step_s)
            simulated[f"{label}/{n}_workers"] = {
                "round_robin": rr,
                "affinity": aff,
                "loads_per_100_jobs": {
                    "round_robin": round(100 * rr["model_loads"] / args.jobs, 1),
                    "affinity": round(100 * aff["model_loads"] / args.jobs, 1),
                },
                "time_ratio_rr_over_affinity": round(rr["seconds"] / max(aff["seconds"], 1e-9), 2),
            }
    report: dict[str, Any] = {
        "measured": measured,
        "jobs": args.jobs,
        "models": args.models,
        "simulated": simulated,
    }
    if args.real:
        report["real"] = real_run()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
