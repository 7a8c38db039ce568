"""What the backend hands the window is plain data: every record it routes to a signal, walked
field by field (by type, and a live placement snapshot by value), holds no callable, lock, module,
probe or tensor that the GUI thread could reach into the worker's session through."""

from __future__ import annotations

import dataclasses
import enum
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePath

import numpy as np
import pytest
import torch

from app.backend.backend import Backend
from app.backend.messages import TaskError, TaskProgress
from app.backend.placement import Placement, PlacementConfig
from core.guidance import GuidancePatch
from core.guidance.spec import PATCHES
from core.memory.policy import MemorySettings, VramState
from core.session import Session

#: leaves a snapshot may hold (numbers, text, paths, pictures as arrays, enum members)
PLAIN: tuple[type, ...] = (int, float, str, bool, bytes, type(None), PurePath, np.ndarray, enum.Enum)
#: arbitrary values: allowed only as a mapping's values (JSON-like records: inspect, run output)
OPAQUE = (typing.Any, object)


def _problems(root: type) -> list[str]:
    """Every field (by type, recursively through dataclasses, unions, tuples and mappings) that
    is not plain data, named by its path."""
    out: list[str] = []
    seen: set[type] = set()

    def walk(tp: object, where: str) -> None:
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            return
        if origin in (dict, Mapping):
            key, value = typing.get_args(tp)
            walk(key, where + "[key]")
            if value not in OPAQUE:
                walk(value, where + "[]")
        elif origin is not None and origin is not Callable and origin is not type:
            for arg in typing.get_args(tp):
                if arg is not Ellipsis:
                    walk(arg, where)
        elif tp is GuidancePatch:  # a protocol: every registered patch record must be plain
            for record in PATCHES.values():
                walk(record, f"{where}<{record.name}>")
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if tp not in seen:
                seen.add(tp)
                hints = typing.get_type_hints(tp)
                for f in dataclasses.fields(tp):
                    walk(hints[f.name], f"{where}.{f.name}")
        elif not (isinstance(tp, type) and tp not in OPAQUE and issubclass(tp, PLAIN)):
            out.append(f"{where}: {tp}")

    walk(root, root.__name__)
    return out


@pytest.fixture
def routed(qtbot) -> Iterator[tuple[type, ...]]:
    backend = Backend(Session())
    yield (*backend._routes, TaskProgress, TaskError)
    assert backend.shutdown()


def test_every_record_the_backend_emits_is_plain_data(routed: tuple[type, ...]) -> None:
    from core.session import MemoryFigures, PlacementInfo

    assert PlacementInfo in routed and MemoryFigures in routed
    problems = [p for root in routed for p in _problems(root)]
    assert problems == []


def _live(value: object, where: str, depth: int = 0) -> Iterator[str]:
    if depth > 20:
        return
    bad = (torch.Tensor, torch.nn.Module, types.ModuleType, type(threading.Lock()), type(threading.RLock()))
    if isinstance(value, bad) or (callable(value) and not isinstance(value, type | enum.Enum)):
        yield f"{where}: {type(value).__qualname__}"
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _live(getattr(value, f.name), f"{where}.{f.name}", depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _live(v, f"{where}[{k!r}]", depth + 1)
    elif isinstance(value, tuple | list | frozenset | set):
        for i, v in enumerate(value):
            yield from _live(v, f"{where}[{i}]", depth + 1)


def test_a_simulated_cards_placement_snapshot_holds_numbers_only() -> None:
    config = PlacementConfig(MemorySettings(vram_state=VramState.NORMAL_VRAM), simulate_bytes=64 << 20)
    placement = Placement(None, config)
    info = placement.describe()
    assert info.memory.limit_bytes == 64 << 20 and info.memory.charged
    assert list(_live(info, "PlacementInfo")) == []
    assert list(_live(placement.memory_figures(), "MemoryFigures")) == []
