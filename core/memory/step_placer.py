"""Placing a model before every test-run step through the memory manager, and counting what the
ops layer streamed: shared by ``loadout run`` and the app's Test run."""

from __future__ import annotations

from collections.abc import Sequence

from core.memory.inference import Workload, activation_bytes, fit_advice, native_workload
from core.memory.manager import LoadResult, MemoryManager, NotEnoughMemoryError
from core.memory.mover import TorchMover

Profile = tuple[str | None, int | None]  # (inference-memory profile, channel width): network_profile


def default_memory_required(manager: MemoryManager, profiles: Sequence[Profile], dtype_bytes: int = 2) -> int:
    """Activation bytes to ask for when the workload is not known yet: one image at each model's
    usual size, activations of ``dtype_bytes`` each (2: fp16/bf16; 4 where the card computes in
    fp32: Pascal, GTX 16-series), the most of them. 0 when the user fixed the inference headroom (a floor
    above the reserve in the manager's settings): that figure then stands for the activations."""
    settings = manager.settings
    if settings.headroom_fixed:
        return 0
    attention = "cpu_flash" if manager.device == "cpu" else "cuda_flash"
    need = 0
    for profile, width in profiles:
        if profile is not None:
            work = native_workload(profile, dtype_bytes, attention)
            need = max(need, activation_bytes(profile, work, width))
    return need


class StepPlacer:
    """``before_step`` for :func:`core.session.testrun.perform_test_run`: asks the manager to place
    ``model`` (a no-op when it already is) with room for the ``workload``'s predicted
    activations, ends the previous step's streaming tally, and keeps the most the manager had
    placed on the device. Without a workload, :func:`default_memory_required` is asked for;
    ``memory_required`` fixes the figure (the user's own inference headroom).
    A refusal raises ``NotEnoughMemoryError`` naming a size or batch that fits."""

    def __init__(
        self,
        manager: MemoryManager,
        mover: TorchMover,
        model: object,
        profile: Profile,
        workload: Workload | None = None,
        memory_required: int | None = None,
    ) -> None:
        self.manager = manager
        self.mover = mover
        self.model = model
        self.profile, self.width = profile
        attention = "cpu_flash" if manager.device == "cpu" else "cuda_flash"
        self.workload = workload or native_workload(self.profile, 2, attention)
        #: the measured model's prediction for the workload (reported beside the measured peak)
        self.predicted = activation_bytes(self.profile, self.workload, self.width)
        if memory_required is None:  # what is asked of the manager: a fixed figure wins
            fallback = default_memory_required(manager, [profile])
            memory_required = self.predicted if workload is not None else fallback
        self.memory_required = memory_required
        self.peak_placed = 0

    def _stats(self) -> None:
        entry = self.manager.find(self.model)
        streamed = self.mover.stats(entry) if entry is not None else None
        if streamed is not None:
            streamed.end_forward()  # the previous step's forward is complete

    def __call__(self) -> None:
        self._stats()
        factors = self.mover.factor_bytes(self.model)  # the LoRA factors placed beside the weights
        result = self.manager.load_models([self.model], self.memory_required + factors)
        if not result.ok:
            raise self._refusal(result)
        placed = sum(info.device_bytes for info in self.manager.loaded())
        self.peak_placed = max(self.peak_placed, placed)

    def _refusal(self, result: LoadResult) -> NotEnoughMemoryError:
        event = next(e for e in result.events if e.kind == "refuse")
        budget = event.shortfall.activation_budget if event.shortfall is not None else 0
        return NotEnoughMemoryError(
            "Not enough GPU memory to run the model",
            why=event.reason,
            fix=fit_advice(self.profile, self.workload, budget, self.width),
        )

    def finish(self) -> tuple[int, int]:
        """After the run: (bytes resident on the device, mean bytes streamed per step)."""
        self._stats()
        entry = self.manager.find(self.model)
        if entry is None:
            return 0, 0
        streamed = self.mover.stats(entry)
        per_step = int(streamed.stats.mean_forward_bytes) if streamed is not None else 0
        return entry.loaded_bytes, per_step
