"""The backend's merge task: merge models through the session's placement (core.merging), with
the library's cached hashes for the recipe and the writer's progress as the task's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.backend.messages import TaskProgress
from app.backend.worker import Reporter
from core.files.writer import WriteProgress
from core.merging.merge import merge_models
from core.merging.recipe import MergeRecipe
from core.session import Session


def merge_work(
    session: Session, paths: list[Path], recipe: MergeRecipe, out: Path
) -> Callable[[Reporter], None]:
    """The task's work: ``(reporter) -> None``, posting the MergeResult and the memory figures."""

    def work(r: Reporter) -> None:
        placement = session.placement
        hashes = session.library.hashes  # the inputs' SHA-256 from the library's cache

        def show(p: WriteProgress) -> None:
            text = f"Merging {p.tensors_done}/{p.tensors_total} tensors"
            r.progress(TaskProgress("merge", p.bytes_done, p.bytes_total, text))

        result = merge_models(
            paths, recipe, out, manager=placement.manager if placement.active else None,
            sha256=lambda p, check: hashes.digest(p, check=check).sha256, check=r.check, progress=show,
        )  # fmt: skip
        r.post(result)
        r.post(placement.memory_figures())

    return work
