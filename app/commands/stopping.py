"""Ctrl-C and SIGTERM while a command works: both set the engine's interrupt flag, which the
engine checks between tensors, layers and steps, so the command stops cleanly (no partial file
left, every model consistent) and says what was written."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import InterruptedByUser
from core.files.guard import FileGuard, changed_error

STOP_SIGNALS = (signal.SIGINT, *((signal.SIGTERM,) if hasattr(signal, "SIGTERM") else ()))


@contextmanager
def stop_signals(interrupt: threading.Event) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM set ``interrupt`` instead of killing the process."""

    def stop(signum: int, frame: object) -> None:
        interrupt.set()

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def raise_keyboard_interrupt(signum: int, frame: object) -> None:
    """SIGTERM handled as Ctrl-C: the same clean stop, the same cleanup of partial files."""
    raise KeyboardInterrupt


def report_stop(exc: InterruptedByUser, what: str = "picture") -> int:
    """Say truthfully what a stopped command wrote; the exit status 130."""
    written = [Path(p) for p in exc.written]
    if not written:
        print(f"\nloadout: stopped; no {what} was written and no model was changed.", file=sys.stderr)
    else:
        print(
            f"\nloadout: stopped; {len(written)} {what}(s) finished before the stop were kept: "
            + ", ".join(str(p) for p in written),
            file=sys.stderr,
        )
    return 130


@contextmanager
def guarded_inputs(
    paths: Iterable[Path | None], interrupt: threading.Event | None = None
) -> Iterator[FileGuard]:
    """Watch the command's input files (:class:`~core.files.guard.FileGuard`): one truncated or
    rewritten meanwhile stops the work, and the stop is reported as that file's error."""
    with FileGuard(interrupt) as guard:
        guard.watch(*paths)
        try:
            yield guard
        except InterruptedByUser:
            if guard.changed is not None:
                raise changed_error(guard.changed) from None
            raise
