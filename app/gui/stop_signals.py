"""SIGTERM, SIGINT and SIGHUP end the window through Qt's event loop, as closing it does.

Python runs a signal handler only in the main thread, between bytecodes; while Qt's event loop
waits in C++ none run, and a handler that raises (the command line's ``KeyboardInterrupt``) would
unwind through whatever Qt slot happens to be running. So, while the window is up:

- ``signal.set_wakeup_fd`` writes each signal's number to a socket a ``QSocketNotifier`` watches:
  the loop wakes at once, and draining the socket runs the Python handler;
- the handler only records the signal and posts a zero-time timer (it may run inside any slot);
  the timer closes the window (its ``closeEvent`` saves the layout and stops the worker, which
  stops a running task at its next step) and quits the loop;
- ``run_gui`` then returns 0 for SIGTERM and SIGHUP (a log-out, ``kill``, systemd: a normal end)
  and 130 for SIGINT (Ctrl-C in the terminal), as the command line does.

A log-out through the desktop's session manager instead reaches Qt as a quit request
(``QGuiApplication.commitDataRequest`` then the windows closed): the same path without a signal.
Bytes for an earlier wakeup fd (the file leases' SIGIO, app/backend/leases.py) are passed on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable
from types import FrameType

from PySide6.QtCore import QObject, QSocketNotifier, QTimer

STOPS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


class StopSignals(QObject):
    """Installed for the event loop's lifetime (a context manager); ``received`` is the first stop
    signal's number, None when the window was closed otherwise."""

    def __init__(self, on_stop: Callable[[], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.on_stop = on_stop
        self.received: int | None = None
        self._previous: dict[int, object] = {}
        self._chained = -1
        self._read, self._write = socket.socketpair()
        for end in (self._read, self._write):
            end.setblocking(False)
        self.notifier = QSocketNotifier(self._read.fileno(), QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._drain)

    def __enter__(self) -> StopSignals:
        try:
            self._chained = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread (a test's helper thread): signals stay as they are
            self._chained = -2
            return self
        for sig in STOPS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if self._chained != -2:
            # hand the wakeup back as it was, unless another one was set after ours (it stays)
            current = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(self._chained if current == self._write.fileno() else current)
        self.notifier.setEnabled(False)
        self._read.close()
        self._write.close()

    def exit_code(self, code: int) -> int:
        if self.received is None:
            return code
        return 130 if self.received == signal.SIGINT else 0

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            data = self._read.recv(4096)
            if self._chained >= 0 and data:
                os.write(self._chained, data)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            QTimer.singleShot(0, self.on_stop)
