"""The one sanitiser for text printed to a terminal: what a file says about itself (trigger words,
tensor names, metadata, file names) can hold escape sequences that hide text or retitle the
window, right-to-left overrides that reorder what is shown, or a single line of a megabyte.

:func:`for_terminal` shows every control and format character escaped (``\\x1b``, ``\\u202e``; a
line break stays a line break) and cuts each over-long line, saying how long it was. JSON output
is never passed through it: it is data, and ``json.dump`` escapes control characters itself.
"""

from __future__ import annotations

import unicodedata

#: a printed line longer than this is cut (the cut says how many characters the line had)
LINE_LIMIT = 1000


def _escaped(ch: str) -> str:
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp") and ch != "\n"


def for_terminal(text: str, *, line_limit: int = LINE_LIMIT) -> str:
    """``text`` as it may be printed: control and format characters escaped, long lines cut."""
    lines = []
    for line in text.split("\n"):
        safe = "".join(_escaped(ch) if _unsafe(ch) else ch for ch in line[: line_limit + 1])
        if len(safe) > line_limit:
            safe = safe[:line_limit] + f" ... (cut: the line has {len(line):,} characters)"
        lines.append(safe)
    return "\n".join(lines)
