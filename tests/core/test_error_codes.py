"""Error codes are one closed set: every code an engine error is raised with is an ``ErrorCode``
member (read from the source, so a new code cannot slip past), and the window has words for each."""

from __future__ import annotations

import ast
from pathlib import Path

from core.errors import ErrorCode, LoadoutError

CORE = Path(__file__).resolve().parents[2] / "core"


def _codes_in_core() -> dict[str, str]:
    found: dict[str, str] = {}

    def note(value: ast.expr | None, where: Path) -> None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.setdefault(value.value, str(where.relative_to(CORE)))

    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "code":
                note(node.value, path)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                    note(node.value, path)
            elif isinstance(node, ast.arguments):
                args = node.posonlyargs + node.args
                pairs = list(zip(args[len(args) - len(node.defaults) :], node.defaults, strict=True))
                pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d]
                for arg, default in pairs:
                    if arg.arg == "code":
                        note(default, path)
    return found


def test_every_code_raised_in_core_is_an_error_code() -> None:
    found = _codes_in_core()
    assert len(found) > 40  # the scan sees the raising sites
    unknown = {c: where for c, where in found.items() if c not in set(ErrorCode)}
    assert not unknown, f"add these to core.errors.ErrorCode: {unknown}"


def test_an_error_code_is_a_plain_string_in_json() -> None:
    err = LoadoutError("x", code=ErrorCode.MISSING_VAE)
    assert err.to_json()["code"] == "missing_vae" and type(ErrorCode.MISSING_VAE.value) is str
