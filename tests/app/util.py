"""Helpers for the app tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from PySide6.QtCore import QObject, QTimer

TIMEOUT = 30000


class Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def args(self, name: str) -> tuple[Any, ...]:
        """The arguments of the last emission of ``name``."""
        for n, a in reversed(self.calls):
            if n == name:
                return a
        raise AssertionError(f"{name} was not emitted; emitted: {[n for n, _ in self.calls]}")

    def first(self, name: str) -> Any:
        return self.args(name)[0]


@contextmanager
def strict(qtbot, source: QObject, *names: str, timeout: int = TIMEOUT) -> Iterator[Recorded]:
    """Wait for ``source``'s signals ``names`` in exactly this order (pytest-qt ``order="strict"``),
    recording their arguments."""
    rec = Recorded()
    signals = [getattr(source, n) for n in names]
    slots = []
    for name, signal in zip(names, signals, strict=True):
        slot = (lambda n: lambda *a: rec.calls.append((n, a)))(name)
        signal.connect(slot)
        slots.append((signal, slot))
    try:
        with qtbot.waitSignals(
            [(s, n) for s, n in zip(signals, names, strict=True)], order="strict", timeout=timeout
        ):
            yield rec
    finally:
        for signal, slot in slots:
            signal.disconnect(slot)


class StallProbe(QObject):
    """A 10 ms timer in the main thread; records the longest gap between its ticks."""

    def __init__(self, interval_ms: int = 10) -> None:
        super().__init__()
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._tick)
        self.last = 0.0
        self.max_gap = 0.0
        self.ticks = 0
        self.phase = "start"
        self.by_phase: dict[str, float] = {}
        self.started_at = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        self.last = self.started_at = time.perf_counter()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()
        self.seconds = time.perf_counter() - self.started_at

    def report(self) -> str:
        phases = ", ".join(f"{k} {v * 1000:.0f}" for k, v in self.by_phase.items())
        total = f"{self.max_gap * 1000:.1f} ms max over {self.seconds:.1f} s, {self.ticks} ticks"
        return f"{total} (max ms per phase: {phases})"

    def _tick(self) -> None:
        now = time.perf_counter()
        gap = now - self.last
        self.max_gap = max(self.max_gap, gap)
        self.by_phase[self.phase] = max(self.by_phase.get(self.phase, 0.0), gap)
        self.last = now
        self.ticks += 1
