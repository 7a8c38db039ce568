"""Model-affinity scheduling: a free worker takes the first queued job whose models (and LoRA
stack) it already holds; failing that, the first job whose models no other worker holds (so the
worker that holds them gets them); failing that, the first job it can run. Round-robin, the
baseline other tools use (the next worker takes the next job), is here for the benchmark."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from core.queue.job import Key


def pick(
    held: Key,
    pending: Sequence[tuple[int, Key]],
    held_elsewhere: Collection[Key],
    can_run: Callable[[int], bool] = lambda job_id: True,
) -> int | None:
    """The job id a free worker holding ``held`` should run next, or None when it can run none.
    ``pending`` is (job id, key) in queue order; ``held_elsewhere`` the other workers' keys."""
    runnable = [(i, k) for i, k in pending if can_run(i)]
    for i, k in runnable:
        if k == held:
            return i
    for i, k in runnable:
        if k not in held_elsewhere:
            return i
    return runnable[0][0] if runnable else None


def pick_round_robin(
    held: Key,
    pending: Sequence[tuple[int, Key]],
    held_elsewhere: Collection[Key],
    can_run: Callable[[int], bool] = lambda job_id: True,
) -> int | None:
    """The baseline: the next job in queue order, whatever the worker holds."""
    return next((i for i, _ in pending if can_run(i)), None)


Picker = Callable[[Key, Sequence[tuple[int, Key]], Collection[Key], Callable[[int], bool]], int | None]
