"""The LoRA stack as the panels see it (napari's layer / controls split): the newest
:class:`StackInfo` snapshot the worker sent, a signal when it changes, and the edits a panel may
ask for. A panel is handed this, never the backend."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QObject, Signal, SignalInstance

from app.backend.messages import StackInfo
from core.session.loras import LoraOptions, StackChange


class StackEditor(Protocol):
    """What of the backend the stack model uses (``app.backend.Backend`` is one)."""

    stack_changed: SignalInstance

    def set_enabled(self, lora_id: str, enabled: bool) -> None: ...
    def remove_lora(self, lora_id: str) -> None: ...
    def preview_strength(self, lora_id: str, model: float, clip: float) -> None: ...
    def bake_strength(self, lora_id: str, model: float, clip: float) -> None: ...
    def reorder(self, order: list[str]) -> None: ...
    def change_stack(self, change: StackChange) -> None: ...


class StackModel(QObject):
    changed = Signal(object)  # StackInfo

    def __init__(self, editor: StackEditor, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._editor = editor
        self.info = StackInfo(None)
        editor.stack_changed.connect(self._on_changed)

    def _on_changed(self, info: StackInfo) -> None:
        self.info = info
        self.changed.emit(info)

    def set_enabled(self, lora_id: str, enabled: bool) -> None:
        self._editor.set_enabled(lora_id, enabled)

    def remove(self, lora_id: str) -> None:
        self._editor.remove_lora(lora_id)

    def set_strength(self, lora_id: str, model: float, clip: float, *, bake: bool) -> None:
        """A slider moving (``bake`` False: previewed at once, coalesced) or let go / typed."""
        send = self._editor.bake_strength if bake else self._editor.preview_strength
        send(lora_id, model, clip)

    def reorder(self, order: list[str]) -> None:
        self._editor.reorder(order)

    def set_options(self, lora_id: str, block_weights: str, on: str | None) -> None:
        """A LoRA's block weights (as a tag writes them, "" none) and the prompt it acts on only."""
        self._editor.change_stack(StackChange(options=(LoraOptions(lora_id, block_weights, on),)))
