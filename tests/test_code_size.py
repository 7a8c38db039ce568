"""No file in ``core/`` or ``app/`` over 400 lines, no function (or method, nested ones included) over
60 (issue 21). A function's length is ``end_lineno - lineno + 1`` from ``ast`` (its signature,
docstring and body; decorators not counted); a file's is its number of lines.

Split by responsibility, not by an arbitrary cut: a builder per group of widgets, reading apart from
validating, a record module beside the class that uses it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("core", "app")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60

#: (path, function name or None for the whole file) still over the limits. Only for files another
#: change in flight owns; the list may only shrink (an entry no longer over fails the test too).
ALLOWED: set[tuple[str, str | None]] = set()


def _oversized(root: Path = ROOT) -> dict[tuple[str, str | None], int]:
    """Every file and function under ``root``'s folders over its limit, with its length."""
    found: dict[tuple[str, str | None], int] = {}
    for path in sorted(p for folder in FOLDERS for p in (root / folder).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            found[(rel, None)] = lines
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    key = (rel, node.name)
                    found[key] = max(length, found.get(key, 0))
    return found


def _name(key: tuple[str, str | None], length: int | None = None) -> str:
    path, function = key
    what = f"{path}: {function}()" if function else path
    return what if length is None else f"{what} has {length} lines"


def test_no_file_over_400_lines_and_no_function_over_60() -> None:
    over = {k: n for k, n in _oversized().items() if k not in ALLOWED}
    assert not over, (
        f"over the limits (files {MAX_FILE_LINES} lines, functions {MAX_FUNCTION_LINES}); split them by "
        "responsibility:\n  " + "\n  ".join(_name(k, n) for k, n in sorted(over.items(), key=str))
    )


def test_the_allow_list_only_names_what_is_still_over() -> None:
    stale = ALLOWED - set(_oversized())
    assert not stale, "now within the limits: remove from ALLOWED:\n  " + "\n  ".join(
        _name(k) for k in sorted(stale, key=str)
    )


def test_the_count_finds_an_oversized_method_and_file(tmp_path: Path) -> None:
    """The walk itself: a long method inside a class, a long nested function and a long file."""
    body = "\n".join(f"        x = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "core" / "sub").mkdir(parents=True)
    (tmp_path / "app").mkdir()
    (tmp_path / "core" / "sub" / "m.py").write_text(f"class A:\n    def long(self) -> None:\n{body}\n")
    (tmp_path / "app" / "f.py").write_text(
        f"def outer() -> None:\n    def inner() -> None:\n{body}\n" + "\n" * MAX_FILE_LINES
    )
    (tmp_path / "app" / "ok.py").write_text("def short() -> None:\n    pass\n")
    assert _oversized(tmp_path) == {
        ("core/sub/m.py", "long"): MAX_FUNCTION_LINES + 1,
        ("app/f.py", "outer"): MAX_FUNCTION_LINES + 2,
        ("app/f.py", "inner"): MAX_FUNCTION_LINES + 1,
        ("app/f.py", None): MAX_FUNCTION_LINES + 2 + MAX_FILE_LINES,
    }
