"""What crosses the thread boundary: small frozen records, never engine objects or widgets.

The worker thread owns the :class:`~core.session.Session` (loaded modules, the LoRA stack, the
library index); the GUI only ever sees these snapshots, delivered by queued signals. The model,
stack, run and placement snapshots are the session's own (:mod:`core.session.snapshots`); the
task records below are the runner's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.library import Entry
from core.session.placement import MemoryFigures, PlacementInfo
from core.session.snapshots import (
    MAIN_KEY,
    ComponentInfo,
    LoraInfo,
    ModelInfo,
    RunReport,
    SessionEvent,
    StackInfo,
)

EngineEvent = SessionEvent  # the window's name for a session event (plot markers, event list)

__all__ = [
    "MAIN_KEY",
    "ComponentInfo",
    "DemoReady",
    "EngineEvent",
    "FilesReleased",
    "LoraInfo",
    "MemoryFigures",
    "ModelInfo",
    "Models",
    "PlacementInfo",
    "RunReport",
    "ScanBatch",
    "ScanDone",
    "StackInfo",
    "Task",
    "TaskError",
    "TaskProgress",
]

Task = Literal[
    "scan",
    "load",
    "unload",
    "lora",
    "strength",
    "run",
    "demo",
    "memory",
    "generate",
    "queue",
    "merge",
    "preprocess",
]


@dataclass(frozen=True)
class TaskProgress:
    """Where a long task is. ``total`` 0 means unknown (a busy indicator)."""

    task: Task
    done: int
    total: int
    text: str

    @property
    def fraction(self) -> float | None:
        return None if self.total <= 0 else min(1.0, self.done / self.total)


@dataclass(frozen=True)
class TaskError:
    """A task that ended with an error; ``code`` is the engine's stable code, ``message`` its text
    (what, why, what to do). ``internal`` marks an unexpected exception (a bug)."""

    task: Task
    code: str
    message: str
    internal: bool = False
    path: Path | None = None


@dataclass(frozen=True)
class Models:
    """Every loaded model, in slot order (the Loaded models panel's rows)."""

    models: tuple[ModelInfo, ...]


@dataclass(frozen=True)
class ScanBatch:
    """Library entries listed or filled in since the last batch."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class ScanDone:
    """A scan ended; the folders it skipped and why."""

    problems: tuple[str, ...]


@dataclass(frozen=True)
class DemoReady:
    folder: str


@dataclass(frozen=True)
class FilesReleased:
    """Changed files the worker unloaded and let go of (their library entries are read again)."""

    paths: tuple[Path, ...]
