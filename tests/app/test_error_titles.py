"""The window has a title and words for every engine error code (no code falls back to the
generic "... failed")."""

from __future__ import annotations

from app.backend.messages import TaskError
from app.gui.errors import _CODES, describe
from core.errors import ErrorCode


def test_every_error_code_has_a_title() -> None:
    missing = sorted(set(ErrorCode) - set(_CODES))
    assert not missing, f"app/gui/errors.py has no title for: {missing}"


def test_each_code_is_described_in_its_own_words() -> None:
    for code in ErrorCode:
        friendly = describe(TaskError("load", code.value, "The engine's message."))
        assert friendly.title and not friendly.title.endswith("failed"), code
