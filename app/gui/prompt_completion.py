"""Completion in the prompt fields: the library's embeddings (``embedding:NAME``) and the LoRAs'
trigger words, offered as the word being typed matches them. LoRA tags (``<lora:NAME:1>``) are not
offered: a tag in the prompt loads nothing in Loadout (the LoRA stack does), it would only be text.

A view helper: the words come from the library entries the window already has
(:func:`completion_words`); nothing is read here."""

from __future__ import annotations

import re
from collections.abc import Iterable

from PySide6.QtCore import QObject, QStringListModel, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QCompleter, QPlainTextEdit

from core.library import Entry

#: where the word being typed starts: after a space, a comma, a bracket or a line break
_WORD_START = re.compile(r"[^\s,()\[\]]*$")
#: fewer typed characters than this offer nothing (a prefix like ``embedding:`` always does)
MIN_PREFIX = 2


def completion_words(entries: Iterable[Entry]) -> list[str]:
    """``embedding:NAME`` per embedding and each LoRA's trigger words."""
    words: dict[str, None] = {}
    for e in entries:
        if e.status != "ok":
            continue
        if e.kind == "embedding":
            words[f"embedding:{e.path.stem}"] = None
        elif e.kind == "lora":
            words.update(dict.fromkeys(w for w in e.trigger_words if w.strip()))
    return sorted(words, key=str.lower)


class PromptCompleter(QObject):
    """Offers :attr:`words` for the word under the cursor of ``edit``; the chosen one replaces it."""

    def __init__(self, edit: QPlainTextEdit) -> None:
        super().__init__(edit)
        self.edit = edit
        self.model = QStringListModel([], self)
        self.completer = QCompleter(self.model, self)
        self.completer.setWidget(edit)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.completer.activated.connect(self.insert)
        edit.textChanged.connect(self._typed)

    @property
    def words(self) -> list[str]:
        return list(self.model.stringList())

    def set_words(self, words: list[str]) -> None:
        if words != self.words:
            self.model.setStringList(words)

    def prefix(self) -> str:
        cursor = self.edit.textCursor()
        block = cursor.block().text()[: cursor.positionInBlock()]
        found = _WORD_START.search(block)
        return found.group(0) if found else ""

    def _typed(self) -> None:
        prefix = self.prefix()
        popup = self.completer.popup()
        if len(prefix) < MIN_PREFIX or not self.words or not self.edit.hasFocus():
            popup.hide()
            return
        self.completer.setCompletionPrefix(prefix)
        if self.completer.completionCount() == 0:
            popup.hide()
            return
        rect = self.edit.cursorRect()
        rect.setWidth(max(200, popup.sizeHintForColumn(0) + 24))
        self.completer.complete(rect)

    def insert(self, word: str) -> None:
        """Replace the word being typed with ``word``."""
        cursor = self.edit.textCursor()
        cursor.movePosition(
            QTextCursor.MoveOperation.Left, QTextCursor.MoveMode.KeepAnchor, len(self.prefix())
        )
        self.edit.blockSignals(True)  # no new popup for the word just chosen
        cursor.insertText(word)
        self.edit.blockSignals(False)
        self.edit.setTextCursor(cursor)
        self.completer.popup().hide()
