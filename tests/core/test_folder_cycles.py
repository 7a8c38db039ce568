"""No import circles between the top folders of ``core`` (module-level imports; an import inside
a function is a deliberate late binding; a ``TYPE_CHECKING`` import is for annotations only). None
remain, and KNOWN_CIRCLES (empty) may not grow; the top of the engine (session, run, generate,
sampling, text, detect) may never be in one."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"

#: Folder pairs that still import each other (each side at module level): debt, never new.
KNOWN_CIRCLES: set[frozenset[str]] = set()
TOP = {"session", "run", "generate", "sampling", "text", "detect"}


def _folder_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in CORE.rglob("*.py"):
        here = path.relative_to(CORE).parts[0].removesuffix(".py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "core" and len(parts) > 1 and parts[1] != here:
                    graph[here].add(parts[1])
    return graph


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_new_import_circles_between_core_folders() -> None:
    graph = _folder_graph()
    circles = {frozenset({a, b}) for a in graph for b in graph[a] if a in _reaches(graph, b)}
    assert circles <= KNOWN_CIRCLES, sorted(sorted(c) for c in circles - KNOWN_CIRCLES)
    assert not any(c & TOP for c in circles), "the top of the engine must import only downwards"


def test_session_does_not_import_run_or_generate() -> None:
    graph = _folder_graph()
    assert not graph["session"] & {"run", "generate"}
    assert "session" not in _reaches(graph, "sampling") and "generate" not in _reaches(graph, "session")
