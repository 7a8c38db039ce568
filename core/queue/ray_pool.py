"""The Ray executor: one actor per worker, each owning a :class:`~core.queue.worker.Worker` (its own
Session, memory manager and device: ``num_gpus=1`` where the cluster has GPUs). The only module
that imports Ray (the optional ``cluster`` extra).

Actors are threaded: ``run`` makes pictures on one thread while ``progress`` and ``stop`` answer on
another, so progress streams back and Stop works mid-job. A job's pictures come back as PNG bytes
and the client writes them. An actor that dies (its process killed, its node gone) is dropped and
its job queued again for the others; when none is left the runner says the cluster went away.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from core.errors import InterruptedByUser, LoadoutError
from core.generate.events import GenerateProgress
from core.queue.job import FileRef, Job, Key
from core.queue.runner import Outcome
from core.queue.worker import Worker
from core.session.snapshots import SessionEvent

_ROOT = str(Path(__file__).resolve().parents[2])  # where the core package is, for a local cluster


class WorkerActor:
    """The actor's body (wrapped by ``ray.remote`` in :class:`RayPool`)."""

    def __init__(
        self, name: str, device: str, vram_limit: int | None, roots: list[str], threads: int
    ) -> None:
        # CPU pictures are bit-identical for the same number of threads (a reduction's order depends
        # on it), so the worker's count is explicit, not whatever the node's environment says
        torch.set_num_threads(threads)
        self.worker = Worker(name, device=device, vram_limit=vram_limit, roots=[Path(r) for r in roots])
        self._progress: tuple[int, GenerateProgress] | None = None

    def pid(self) -> int:
        return os.getpid()

    def missing(self, files: tuple[FileRef, ...]) -> list[FileRef]:
        return self.worker.missing(files)

    def run(self, job_id: int, job: Job) -> tuple[str, Any, list[SessionEvent]]:
        def progress(p: GenerateProgress) -> None:
            self._progress = (job_id, replace(p, preview=None))

        try:
            return "ok", self.worker.run(job, progress), self.worker.drain_events()
        except InterruptedByUser:
            return "interrupted", None, self.worker.drain_events()
        except LoadoutError as exc:
            return "error", (exc.code, exc.what, exc.why, exc.fix), self.worker.drain_events()
        finally:
            self._progress = None

    def poll(self) -> tuple[tuple[int, GenerateProgress] | None, list[SessionEvent]]:
        """The running job's progress and the session's events so far (answered while it runs)."""
        return self._progress, self.worker.drain_events()

    def stop(self) -> None:
        self.worker.stop()

    def stats(self) -> dict[str, int]:
        return {"jobs": self.worker.jobs, "model_loads": self.worker.model_loads}


#: how long joining a cluster may take before the address is said to be unreachable (seconds)
CONNECT_SECONDS = 60.0


def _init_within(seconds: float, stop: Callable[[], bool], **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` on a helper thread, waited for at most ``seconds`` and while ``stop()``
    is False: a bad address makes Ray retry for minutes, deaf to Ctrl-C, in its own call."""
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="ray-init", daemon=True).start()
    deadline = time.monotonic() + seconds
    while not done.wait(0.1):
        if stop():
            raise InterruptedByUser("stopped", why="while joining the cluster")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {seconds:g} s")
    if failed:
        raise failed[0]


def connect(
    address: str, *, seconds: float = CONNECT_SECONDS, stop: Callable[[], bool] = lambda: False
) -> int:
    """Join the cluster at ``address`` (``ray://host:10001``, ``host:6379``, ``auto``) or start a local
    one for ``local:N``; returns how many workers to start: N, one per GPU, or one per node. A
    cluster that does not answer within ``seconds`` is unreachable; ``stop()`` ends the wait."""
    local = address.startswith("local:")
    count = 0
    if local:
        try:
            count = int(address.removeprefix("local:"))
        except ValueError:
            count = 0
        if not 1 <= count <= 64:
            raise LoadoutError(
                f"{address!r} is not a local cluster size",
                fix="Write local:N with N from 1 to 64",
                code="bad_argument",
            )
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)}}
    if not ray.is_initialized():
        try:
            if local:
                ray.init(
                    num_cpus=count, include_dashboard=False, log_to_driver=False, runtime_env=env,
                    logging_level=logging.ERROR,
                )  # fmt: skip
            else:
                _init_within(
                    seconds, stop, address=address, log_to_driver=False, runtime_env=env,
                    logging_level=logging.ERROR,
                )  # fmt: skip
        except (ConnectionError, RayError, ValueError, RuntimeError, TimeoutError) as exc:
            raise LoadoutError(
                f"cannot reach the Ray cluster at {address}",
                why=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                fix="Start the cluster's head node or check the address; local:N starts one on this machine",
                code="cluster_unreachable",
            ) from None
    if count:
        return count
    gpus = int(_resources().get("GPU", 0))
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return gpus or max(1, sum(1 for n in nodes if n.get("Alive")))


def _resources() -> dict[str, float]:
    found: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return found


class RayPool:
    """Workers as Ray actors on the cluster this process is connected to (see :func:`connect`)."""

    def __init__(
        self,
        count: int,
        *,
        roots: Sequence[Sequence[Path]] = (),  # each worker's model folders (none: the hints only)
        vram_limit: int | None = None,
        cpus_per_worker: float = 1.0,
    ) -> None:
        gpus = _resources().get("GPU", 0) >= 1
        per_worker = [list(r) for r in roots]
        actor = ray.remote(WorkerActor).options(
            num_gpus=1 if gpus else 0, num_cpus=cpus_per_worker, max_concurrency=4, max_restarts=0
        )
        self._actors: dict[str, Any] = {}
        for i in range(count):
            name = f"w{i}"
            folders = [str(p) for p in per_worker[i]] if i < len(per_worker) else []
            threads = max(1, int(cpus_per_worker))
            self._actors[name] = actor.remote(name, "cuda" if gpus else "cpu", vram_limit, folders, threads)
        self._held: dict[str, Key] = dict.fromkeys(self._actors, ((), ()))
        self._running: dict[Any, tuple[str, int, Job]] = {}  # ObjectRef -> (worker, job id, job)
        self._progress: dict[int, GenerateProgress] = {}
        self._events: list[tuple[str, SessionEvent]] = []
        self._stats: dict[str, dict[str, int]] = {
            name: {"jobs": 0, "model_loads": 0} for name in self._actors
        }
        try:
            self.pids = {name: ray.get(a.pid.remote(), timeout=300) for name, a in self._actors.items()}
        except (RayError, ConnectionError) as exc:
            self.close()
            raise LoadoutError(
                f"the cluster could not start {count} worker(s)",
                why=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                fix="Check that each node has Loadout installed (pip install 'loadout[cluster]') and a free "
                "GPU or CPU for each worker (ray status)",
                code="cluster_workers",
            ) from None

    def _lose(self, worker: str) -> None:
        self._actors.pop(worker, None)

    def workers(self) -> list[str]:
        return list(self._actors)

    def held(self, worker: str) -> Key:
        return self._held.get(worker, ((), ()))

    def missing(self, worker: str, files: tuple[FileRef, ...]) -> list[FileRef]:
        try:
            found: list[FileRef] = ray.get(self._actors[worker].missing.remote(files), timeout=600)
            return found
        except (RayError, KeyError):
            self._lose(worker)
            return list(files)

    def start(self, worker: str, job_id: int, job: Job) -> None:
        self._held[worker] = job.key()  # what it loads now: the next free worker looks elsewhere
        self._running[self._actors[worker].run.remote(job_id, job)] = (worker, job_id, job)

    def wait(self, timeout: float) -> list[Outcome]:
        if not self._running:
            return []
        try:
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=timeout)
        except (RayError, ConnectionError):
            ready = list(self._running)
        out = []
        for ref in ready:
            worker, job_id, job = self._running.pop(ref)
            self._progress.pop(job_id, None)
            try:
                status, value, events = ray.get(ref)
                self._events += [(worker, e) for e in events]
            except (RayActorError, RayError, ConnectionError):
                self._lose(worker)
                out.append(Outcome(worker, job_id, lost=True))
                continue
            if status == "ok":
                self._held[worker] = job.key()
                self._stats[worker]["jobs"] += 1
                self._stats[worker]["model_loads"] += value.model_loads
                out.append(Outcome(worker, job_id, value))
            elif status == "interrupted":
                out.append(Outcome(worker, job_id, interrupted=True))
            else:
                code, what, why, fix = value
                out.append(Outcome(worker, job_id, error=LoadoutError(what, why=why, fix=fix, code=code)))
        return out

    def progress(self) -> dict[int, GenerateProgress]:
        for worker in list({w for w, _, _ in self._running.values()}):
            try:
                found, events = ray.get(self._actors[worker].poll.remote(), timeout=5)
            except (RayError, GetTimeoutError, KeyError):
                continue
            self._events += [(worker, e) for e in events]
            if found is not None:
                self._progress[found[0]] = found[1]
        return dict(self._progress)

    def events(self) -> list[tuple[str, SessionEvent]]:
        out, self._events = self._events, []
        return out

    def stop(self, worker: str | None = None) -> None:
        for name, a in list(self._actors.items()):
            if worker is not None and name != worker:
                continue
            with contextlib.suppress(RayError):
                a.stop.remote()

    def stats(self) -> dict[str, dict[str, int]]:
        return {w: dict(s) for w, s in self._stats.items()}

    def close(self) -> None:
        for a in self._actors.values():
            with contextlib.suppress(RayError, ConnectionError):
                ray.kill(a)
        self._actors.clear()


def shutdown() -> None:
    """Stop the local cluster :func:`connect` started (or leave a joined one)."""
    ray.shutdown()
