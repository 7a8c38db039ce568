"""What each VRAM mode does on a card of the size set in Settings (a simulated card, or the real
card limited to that size), worded from the engine's own choice so Settings says what the memory
manager will do: Automatic is named with the mode the engine picks for that size."""

from __future__ import annotations

import html

from core.memory.devices import nvidia_device
from core.memory.policy import MemorySettings, VramState, choose_vram_state
from core.units import MIB

MODES = (VramState.NO_VRAM, VramState.LOW_VRAM, VramState.NORMAL_VRAM, VramState.HIGH_VRAM)


def vram_help(size_mib: int, mode: str, has_gpu: bool) -> str:
    """HTML: the mode the engine uses for this card and what every mode would do on it."""
    if size_mib <= 0:
        if has_gpu:
            return "Automatic picks the mode from your card's size (shown in the Memory panel)."
        return "No GPU: models compute on the CPU. Set a simulated card to watch the memory manager."
    total = size_mib * MIB
    card = nvidia_device(0, "Simulated GPU", total, (8, 6), simulated=True)
    wanted = None if mode == "auto" else VramState.parse(mode)
    chosen = choose_vram_state(card, total, MemorySettings(vram_state=wanted))
    size = f"{size_mib} MiB" if size_mib < 1024 else f"{size_mib / 1024:g} GiB"
    who = "Automatic picks" if chosen.automatic else "Your choice:"
    lines = [f"<b>{size} card: {who} {chosen.state.title}</b>: {html.escape(_effect(chosen.reason))}."]
    if chosen.state is VramState.NO_VRAM:
        lines.append(
            "Nothing stays on the card between steps: Loaded models shows nothing placed and the plot "
            "shows layers streaming through. Choose Normal VRAM to watch the manager keep what fits."
        )
    rows = []
    for state in MODES:
        effect = _effect(choose_vram_state(card, total, MemorySettings(vram_state=state)).reason)
        rows.append(f"<li><b>{state.title.capitalize()}</b>: {html.escape(effect)}</li>")
    lines.append(f"On this card:<ul style='margin:0'>{''.join(rows)}</ul>")
    return "<br>".join(lines)


def _effect(reason: str) -> str:
    """ "2 GiB card: low VRAM (your setting; …); models load partially…" -> "models load partially…" """
    return reason.rsplit("; ", 1)[-1]
