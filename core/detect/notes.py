"""Informational lines among a detection's warnings.

A detection's ``warnings`` are shown in amber; some lines only explain an ordinary file (how a
LoRA's base model was read from its shapes, that SD1/SD2/SDXL VAEs share shapes). Those start
with :data:`NOTE_PREFIX` so the window and ``loadout inspect`` show them as notes, not warnings,
while the record's shape (a list of strings, cached in the library's sqlite) stays the same.
"""

from __future__ import annotations

NOTE_PREFIX = "Note: "


def note(text: str) -> str:
    return f"{NOTE_PREFIX}{text}"


def is_note(text: str) -> bool:
    return text.startswith(NOTE_PREFIX)
