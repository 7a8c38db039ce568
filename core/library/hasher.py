"""The background hash pass: one low-priority thread that hashes library files one at a time.

:func:`plan_hashes` picks the files still without a hash (possible duplicates first, then smallest
first, so LoRAs and likely duplicates are confirmed early; sparse placeholders are skipped) and
:class:`BackgroundHasher` works through them. It never blocks its caller: :meth:`~BackgroundHasher.submit`
replaces the queue, :meth:`~BackgroundHasher.pause` holds it between chunks (the app pauses it
while a load or a picture runs), :meth:`~BackgroundHasher.cancel` drops the queue and the file in
progress, :meth:`~BackgroundHasher.stop` ends the thread (app quit). The thread lowers its own
CPU priority (and so, under Linux's CFQ/BFQ, its I/O priority) where the platform allows.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.library.entry import Entry
from core.library.hashes import FileDigest, HashStore, mostly_holes


@dataclass(frozen=True)
class HashJob:
    path: Path
    addnet: bool = False  # also the LoRA hash of a safetensors LoRA (A1111's "Lora hashes")


@dataclass(frozen=True)
class HashProgress:
    """``done`` of ``total`` files hashed in this pass; ``current`` is being read; ``running``
    False once the pass ended (finished, cancelled or stopped)."""

    done: int
    total: int
    current: Path | None
    running: bool
    failed: int = 0


def plan_hashes(entries: Iterable[Entry]) -> list[HashJob]:
    """Files that still need a hash, in the order worth hashing them."""
    todo = [e for e in entries if e.sha256 is None and e.error_code not in ("not_found", "unreadable")]
    sizes = Counter(e.size for e in todo)
    keep: list[Entry] = []
    for e in todo:
        try:
            if mostly_holes(os.stat(e.path)):
                continue
        except OSError:
            continue
        keep.append(e)
    keep.sort(key=lambda e: (sizes[e.size] < 2, e.size, str(e.path)))
    return [HashJob(e.path, addnet=e.kind == "lora") for e in keep]


class _Cancelled(Exception):
    pass


OnHashed = Callable[[Path, FileDigest], None]
OnProgress = Callable[[HashProgress], None]


class BackgroundHasher:
    """Hashes submitted files on its own thread, reporting each digest to ``on_hashed`` and the
    pass's progress to ``on_progress`` (both called on that thread)."""

    def __init__(
        self,
        store: HashStore,
        on_hashed: OnHashed,
        on_progress: OnProgress | None = None,
        *,
        nice: int = 10,
    ) -> None:
        self.store = store
        self._on_hashed = on_hashed
        self._on_progress = on_progress
        self._nice = nice
        self._cond = threading.Condition()
        self._queue: list[HashJob] = []
        self._stop = False
        self._cancel = False
        self._resume = threading.Event()
        self._resume.set()
        self._thread: threading.Thread | None = None
        self._done = 0
        self._failed = 0
        self._total = 0
        self._working = False
        self.errors: list[str] = []  # "name: why" for files that could not be read

    # -- control (any thread) -----------------------------------------------------------------

    def submit(self, jobs: Sequence[HashJob]) -> None:
        """Hash ``jobs`` (replacing what was still queued; the file in progress goes on)."""
        with self._cond:
            if self._stop:
                return
            self._queue = list(jobs)
            self._cancel = False
            self._done = self._failed = 0
            self._total = len(self._queue) + (1 if self._working else 0)
            if self._thread is None and self._queue:
                self._thread = threading.Thread(target=self._run, name="loadout-hasher", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pause(self) -> None:
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def cancel(self) -> None:
        """Drop the queue and the file being read (its partial hash is thrown away)."""
        with self._cond:
            had_work = bool(self._queue)
            self._queue = []
            self._cancel = True
            idle = not self._working  # else the thread reports the pass's end itself
            self._cond.notify_all()
        self._resume.set()
        if had_work and idle:
            self._report(None, False)

    def stop(self, timeout: float | None = 5.0) -> bool:
        """End the thread (within one chunk's read); True when it ended."""
        with self._cond:
            self._stop = True
            self._queue = []
            self._cond.notify_all()
        self._resume.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._working or bool(self._queue)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until the queue is empty and no file is being read (tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._working or self._queue), timeout)

    # -- the thread -----------------------------------------------------------------------------

    def _check(self) -> None:
        if self._stop or self._cancel:
            raise _Cancelled
        while not self._resume.is_set():
            self._resume.wait(0.25)
            if self._stop or self._cancel:
                raise _Cancelled

    def _next(self) -> HashJob | None:
        with self._cond:
            self._working = False
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._stop or bool(self._queue))
            if self._stop:
                return None
            self._cancel = False
            self._working = True
            return self._queue.pop(0)

    def _report(self, current: Path | None, running: bool) -> None:
        if self._on_progress is not None:
            self._on_progress(HashProgress(self._done, self._total, current, running, self._failed))

    def _run(self) -> None:
        _lower_priority(self._nice)
        while (job := self._next()) is not None:
            self._report(job.path, True)
            try:
                digest = self.store.digest(job.path, addnet=job.addnet, check=self._check, drop_cache=True)
            except _Cancelled:
                self._report(None, False)
                continue
            except OSError as exc:
                self._failed += 1
                self.errors.append(f"{job.path.name}: {exc.strerror or exc}")
            else:
                self._on_hashed(job.path, digest)
            self._done += 1
            with self._cond:
                last = not self._queue
            if last:
                self._report(None, False)


def _lower_priority(nice: int) -> None:
    """Lower this thread's priority (Linux: a thread id is a process id for setpriority)."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except (OSError, AttributeError):
        pass
