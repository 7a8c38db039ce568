"""Byte units and the one way reasons and messages write a byte figure (a leaf: imports nothing of core)."""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20


def gib(n: int | float) -> str:
    """Bytes as the figure reasons use: ``gib(1_720_000_000) == "1.60 GiB"``; below 100 MiB
    (tiny test and demo models) in MiB or KiB, where GiB would read "0.00 GiB"."""
    if 0 < abs(n) < MIB:
        return f"{n / 1024:.1f} KiB"
    if 0 < abs(n) < 100 * MIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"
