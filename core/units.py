"""Byte units and every way the engine and the window write a byte figure (a leaf: imports nothing
of core). Each style has one function here; the texts are contracts (event reasons, ``loadout run``
output, messages the tests compare), so a style changes here or nowhere."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def gib(n: int | float) -> str:
    """Bytes as the figure reasons use: ``gib(1_720_000_000) == "1.60 GiB"``; below 100 MiB
    (tiny test and demo models) in MiB or KiB, where GiB would read "0.00 GiB"."""
    if 0 < abs(n) < MIB:
        return f"{n / KIB:.1f} KiB"
    if 0 < abs(n) < 100 * MIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


def in_gib(n: int | float, digits: int = 2) -> str:
    """Always in GiB: ``in_gib(3 * GIB) == "3.00 GiB"``."""
    return f"{n / GIB:.{digits}f} GiB"


def in_mib(n: int | float, digits: int = 0) -> str:
    """Always in MiB: ``in_mib(12 * MIB) == "12 MiB"``, ``in_mib(MIB // 2, 1) == "0.5 MiB"``."""
    return f"{n / MIB:.{digits}f} MiB"


def mib_or_gib(n: int | float, *, gib_from: int = GIB, mib_digits: int = 0) -> str:
    """:func:`in_gib` from ``gib_from`` bytes up, :func:`in_mib` below (activation budgets, fit texts)."""
    return in_gib(n) if n >= gib_from else in_mib(n, mib_digits)


def card_size(n: int | float) -> str:
    """A card's or a limit's size for sentences: "24 GiB", "3.8 GiB", "0.5 GiB"."""
    size = n / GIB
    if size >= 10 or abs(size - round(size)) < 0.05:
        return f"{size:.0f} GiB"
    return f"{size:.1f} GiB"


def decimal_size(n: int | float) -> str:
    """Powers of 1000, as file browsers show sizes: "512 B", "6.9 GB", "1.20 TB"."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"
