"""The engine speaks in engine terms: no menu paths, shortcuts or demo special cases in ``core``
(the window adds where to click, ``app/gui/errors.py``; the demo's notes live in ``app/demo.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"
GUI_WORDS = ("Ctrl+", "Settings >", "double-click", "Load to GPU", "loadout-demo", "(F5)")


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (words for developers may name the window)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_core_strings_name_no_window_words() -> None:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                hits = [w for w in GUI_WORDS if w in node.value]
                if hits:
                    found.append(f"{path.relative_to(CORE)}:{node.lineno}: {hits}")
    assert not found, "\n".join(found)
