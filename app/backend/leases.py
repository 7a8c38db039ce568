"""The window's read leases on the files it keeps mapped (see :mod:`core.files.leases`).

A model file truncated under its mapping would kill the window with SIGBUS at the next read. The
worker holds every file the session and the generation caches keep mapped under a read lease
(:class:`~core.files.leases.MappedFiles`, kept in step after each job). Another program that
truncates or rewrites one is held by the kernel while this process gets SIGIO:

- :class:`SigioWakeup` (one per process, in the GUI thread) makes SIGIO's Python handler run at
  once while Qt's event loop sleeps: ``signal.set_wakeup_fd`` writes to a pipe a
  ``QSocketNotifier`` watches, and draining it runs the handler (signals reach Python only in the
  main thread, between bytecodes);
- the handler (:meth:`WindowLeases._on_sigio`) marks the files, stops the running task (the
  backend's stop flag) and queues an unload;
- at the start of every job, before it touches a mapping, :meth:`WindowLeases.before` unloads what
  was mapped from marked files, releases their leases (the other program goes on), and refuses the
  job with "X was changed on disk while loaded; Loadout unloaded it"; the library entries are read
  again a moment later.

Where no lease can be taken, the same check at the start of each job compares the held files'
sizes and mtimes (:meth:`~core.files.leases.MappedFiles.changed`) and refuses in the same words
before the mapping is read.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, ClassVar

from PySide6.QtCore import QObject, QSocketNotifier, QTimer

from app.backend.messages import FilesReleased, ScanBatch
from app.backend.worker import Reporter
from core.files.leases import LEASES, MappedFiles, unloaded_error
from core.files.shards import expand_shards

if TYPE_CHECKING:
    from app.backend.backend import Backend

#: how long after letting go of a changed file its library entry is read again (the other program
#: has been waiting on the lease and goes on now)
REFRESH_MS = 1000

REASON = "its file was changed on disk by another program"


class SigioWakeup(QObject):
    """SIGIO handled promptly in the GUI thread (see the module notes); one per process, kept."""

    _instance: ClassVar[SigioWakeup | None] = None

    @classmethod
    def install(cls) -> SigioWakeup | None:
        """The process's wakeup, made on first use; None where leases cannot be had or signals
        cannot be set (not Linux, not the main thread)."""
        if not LEASES or not hasattr(signal, "SIGIO"):
            return None
        if threading.current_thread() is not threading.main_thread():
            return None
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[weakref.WeakMethod[Callable[[], None]]] = []
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        self._chained = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous = signal.signal(signal.SIGIO, self._on_signal)
        self.notifier = QSocketNotifier(self._read, QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._drain)

    def listen(self, method: Callable[[], None]) -> None:
        """Call ``method`` (a bound method, held weakly) on each SIGIO, in the GUI thread."""
        self._listeners.append(weakref.WeakMethod(method))  # type: ignore[arg-type]

    def _drain(self) -> None:
        """Empty the pipe (the handler itself has run by now, or runs as this returns); bytes go on
        to a wakeup fd set before ours (an event loop of another library)."""
        with contextlib.suppress(OSError):
            data = os.read(self._read, 4096)
            if self._chained >= 0 and data:
                os.write(self._chained, data)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._listeners = [ref for ref in self._listeners if ref() is not None]
        for ref in list(self._listeners):
            method = ref()
            if method is not None:
                method()
        if callable(self._previous):
            self._previous(signum, frame)


class WindowLeases:
    """The backend's half: the held files, the check before each job, the SIGIO listener."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        wakeup = SigioWakeup.install()
        self.files = MappedFiles(leases=wakeup is not None)
        if wakeup is not None:
            wakeup.listen(self._on_sigio)

    # -- GUI thread ------------------------------------------------------------------------------
    def _on_sigio(self) -> None:
        """A lease is breaking: mark its files, stop the running task, queue their unload. Runs as
        a signal handler: only flags and a zero-time timer here, the rest in the worker."""
        breaking = self.files.breaking()
        if not breaking:
            return  # a SIGIO of something else, or another window's file
        self.files.mark(breaking)
        if self._backend.busy:
            self._backend.stop_flag.set()
        QTimer.singleShot(0, self._backend, lambda: self._backend.submit("unload", lambda r: None))

    def released(self, message: object) -> None:
        """Changed files were let go of: read their library entries again once the other program
        has had a moment (they may be different files now)."""
        assert isinstance(message, FilesReleased)
        work = self._refresh(message.paths)
        QTimer.singleShot(REFRESH_MS, self._backend, lambda: self._backend.submit("scan", work))

    def _refresh(self, paths: tuple[Path, ...]) -> Callable[[Reporter], None]:
        def work(r: Reporter) -> None:
            index = self._backend.session.library.index
            entries = [e for p in paths if index is not None and (e := index.refresh(p)) is not None]
            if entries:
                r.post(ScanBatch(tuple(entries)))

        return work

    # -- worker thread ---------------------------------------------------------------------------
    def guarded(
        self, work: Callable[[Reporter], None], path: Path | None, maps: tuple[Path, ...] = ()
    ) -> Callable[[Reporter], None]:
        """``work`` run after :meth:`before`, with ``path`` (the file it loads) and ``maps`` (the
        other files it maps: a generation's ControlNets, upscale model, refiner) held before they
        are mapped, and the held files brought in step with what is mapped after it."""

        def run(r: Reporter) -> None:
            self.before(r)
            self.files.hold(expand_shards([path, *maps]))  # a split model: every shard
            try:
                work(r)
            finally:
                mapped = self._backend.generator.mapped_files()
                self.files.hold(mapped)
                self.files.keep_only(mapped)

        return run

    def before(self, r: Reporter) -> None:
        """Unload what was mapped from changed files, let go of them, refuse the job in words."""
        changed = self.files.take_marked()
        if not changed:
            return
        unloaded = self._backend.generator.unload_files(changed, REASON)
        gc.collect()  # the mapping goes with the last tensor on it (a rare event: worth a pass)
        self.files.release(changed)
        self._backend.post_snapshots(r)
        r.post(FilesReleased(tuple(dict.fromkeys([*unloaded, *changed]))))
        raise unloaded_error(unloaded or changed)

    def release_all(self) -> None:
        """The worker has ended: nothing is read any more."""
        self.files.release_all()
