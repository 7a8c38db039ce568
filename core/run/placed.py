"""Placing a model before every test-run step through the memory manager, and counting what the
ops layer streamed: shared by ``loadout run`` and the app's Test run."""

from __future__ import annotations

from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover


class StepPlacer:
    """``before_step`` for :func:`core.run.testrun.perform_test_run`: asks the manager to place
    ``model`` (a no-op when it already is), ends the previous step's streaming tally, and keeps
    the most the manager had placed on the device."""

    def __init__(self, manager: MemoryManager, mover: TorchMover, model: object) -> None:
        self.manager = manager
        self.mover = mover
        self.model = model
        self.peak_placed = 0

    def _stats(self) -> None:
        entry = self.manager.find(self.model)
        streamed = self.mover.stats(entry) if entry is not None else None
        if streamed is not None:
            streamed.end_forward()  # the previous step's forward is complete

    def __call__(self) -> None:
        self._stats()
        self.manager.load_models([self.model]).raise_if_refused()
        placed = sum(info.device_bytes for info in self.manager.loaded())
        self.peak_placed = max(self.peak_placed, placed)

    def finish(self) -> tuple[int, int]:
        """After the run: (bytes resident on the device, mean bytes streamed per step)."""
        self._stats()
        entry = self.manager.find(self.model)
        if entry is None:
            return 0, 0
        streamed = self.mover.stats(entry)
        per_step = int(streamed.stats.mean_forward_bytes) if streamed is not None else 0
        return entry.loaded_bytes, per_step
