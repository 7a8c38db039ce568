"""Completion in the prompt fields: the library's embeddings and the LoRAs' trigger words, offered as
a word is typed, the chosen one replacing what was typed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from app.gui.prompt_completion import completion_words
from core.library import Entry


def _entry(path: str, kind: str, triggers: tuple[str, ...] = (), status: str = "ok") -> Entry:
    p = Path("/lib") / path
    return Entry(p, "folder:/lib", Path("/lib"), "", None, 1, 1, status=status, kind=kind,  # type: ignore[arg-type]
                 trigger_words=triggers)  # fmt: skip


@pytest.fixture
def panel(panel: GeneratePanel) -> GeneratePanel:
    """The shared panel (tests/app/conftest.py) with the library's words to complete."""
    words = completion_words([
        _entry("embeddings/EasyNegative.pt", "embedding"),
        _entry("loras/detail.safetensors", "lora", ("hyperdetailed",)),
        _entry("embeddings/broken.pt", "embedding", status="error"),
        _entry("checkpoints/sd15.safetensors", "checkpoint"),
    ])  # fmt: skip
    panel.set_completions(words)
    return panel


def test_the_library_gives_embeddings_and_trigger_words(panel: GeneratePanel) -> None:
    # no <lora:...> tags: a tag in the prompt loads nothing (the stack does), it would be text
    assert panel.completers[0].words == ["embedding:EasyNegative", "hyperdetailed"]


# the offscreen platform cannot grab the keyboard for a popup (a real screen does)
@pytest.mark.qt_log_ignore("propagateSizeHints", "does not support raise", "grabbing the keyboard")
def test_typing_offers_and_choosing_replaces_the_word(panel: GeneratePanel, qtbot: QtBot) -> None:
    completer = panel.completers[1]
    panel.negative.setFocus()
    qtbot.keyClicks(panel.negative, "blurry, easyne")
    popup = completer.completer.popup()
    qtbot.waitUntil(popup.isVisible)
    assert completer.completer.currentCompletion() == "embedding:EasyNegative"
    completer.insert(completer.completer.currentCompletion())
    assert panel.negative.toPlainText() == "blurry, embedding:EasyNegative"
    assert not popup.isVisible()
    qtbot.keyClicks(panel.negative, ", (zz")
    assert not popup.isVisible()  # nothing matches
