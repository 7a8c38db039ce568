"""The engine speaks in engine terms: no menu paths, shortcuts, buttons, command-line flags or demo
special cases in ``core`` (an error names the missing input or value; the window adds where to
click, ``app/gui/errors.py``; the command line adds its flags, ``app/commands/words.py``; the demo's
notes live in ``app/demo.py``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"
GUI_WORDS = ("Ctrl+", "Settings >", "double-click", "Load to GPU", "loadout-demo", "(F5)")
#: a command-line flag (``--vae``) or a widget word, in any string core shows
FRONT_END = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+|\b(button|click|menu|checkbox|slider)\b", re.IGNORECASE)
#: files whose strings still name flags: none left (kept so a future exception must be named and
#: justified here; a listed file that is clean fails)
NOT_YET: set[str] = set()


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (words for developers may name the window)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _strings(path: Path) -> list[ast.Constant]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_core_strings_name_no_window_words() -> None:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in _strings(path):
            hits = [w for w in GUI_WORDS if w in str(node.value)]
            if hits:
                found.append(f"{path.relative_to(CORE)}:{node.lineno}: {hits}")
    assert not found, "\n".join(found)


def test_core_strings_name_no_flags_or_widgets() -> None:
    found, clean = [], set(NOT_YET)
    for path in sorted(CORE.rglob("*.py")):
        name = str(path.relative_to(CORE))
        for node in _strings(path):
            hits = FRONT_END.findall(str(node.value))
            if hits:
                clean.discard(name)
                if name not in NOT_YET:
                    found.append(f"{name}:{node.lineno}: {str(node.value)[:80]!r}")
    assert not found, (
        "core names a flag or widget (name the input; app/commands/words.py adds the flag):\n"
        + ("\n".join(found))
    )
    assert not clean, f"no longer naming flags, take them off NOT_YET: {sorted(clean)}"
