"""Work-arounds for the Qt binding, applied by the composition root before the window is built.

PySide6 6.12.0 wheels on CPython 3.11 return ``None`` from void methods without a reference (the
abi3 build assumes an immortal ``None``, which only CPython 3.12+ has): every ``label.setText()``
drops ``None``'s reference count by one, and after ~100,000 calls the process aborts with "Fatal
Python error: none_dealloc". :func:`guard_none_refcount` detects that and makes ``None`` immortal
the way 3.12 does, by raising its count once (``None`` is a static singleton that must never be
freed anyway). Nothing happens on a correct build or on CPython 3.12+.
"""

from __future__ import annotations

import ctypes
import sys

_IMMORTAL = 1 << 40
_state = {"applied": False}


def _void_calls_leak_none() -> bool:
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(200):
        probe.setObjectName("loadout-refcount-probe")
    return before - sys.getrefcount(None) >= 100


def guard_none_refcount() -> bool:
    """Make ``None`` immortal if this PySide6 build leaks its references; True when applied."""
    if _state["applied"]:
        return True
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False
    if not _void_calls_leak_none():
        return False
    ctypes.c_ssize_t.from_address(id(None)).value += _IMMORTAL
    _state["applied"] = True
    return True
