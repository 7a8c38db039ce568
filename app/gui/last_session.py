"""The loaded model and its LoRA stack, kept across a relaunch: remembered as they change, and
offered again at the next start ("Load again" in the message bar, one click) once the library is
read; the LoRAs come back at their strengths, switched off where they were off.

A thin Qt-side helper: it is given the backend's signals, the settings store and two callables
(show an offer, load a path) instead of the whole window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSettings

from app.backend.backend import Backend
from core.session.snapshots import ModelInfo, StackInfo

_KEY = "session/last"
Offer = Callable[[str, Callable[[], None]], None]


class LastSession(QObject):
    def __init__(
        self, backend: Backend, store: QSettings, offer: Offer, load: Callable[[Path], None],
        parent: QObject | None = None,
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.backend, self.store, self.offer, self.load = backend, store, offer, load
        self.saved = self._read()  # what the last session ended with, before this one changes it
        self.now: dict[str, object] = dict(self.saved)
        self._offered = False
        self._restoring: list[dict[str, object]] | None = None  # LoRAs to add once it is loaded
        self._switch_off: set[Path] = set()
        backend.models_changed.connect(self._models)
        backend.stack_changed.connect(self._stack)
        backend.model_loaded.connect(self._loaded)
        backend.scan_done.connect(lambda _problems: self._offer())

    def _read(self) -> dict[str, object]:
        raw = self.store.value(_KEY)
        try:
            value = json.loads(str(raw)) if raw else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def _write(self) -> None:
        self.store.setValue(_KEY, json.dumps(self.now))

    # -- remembered as it changes ----------------------------------------------------------------
    def _models(self, models: tuple[ModelInfo, ...]) -> None:
        main = next((m for m in models if m.is_main), None)
        if main is None:
            return  # nothing loaded (yet): the last session's model stays on offer
        if self.now.get("model") != str(main.path):
            self.now = {"model": str(main.path), "kind": main.kind, "loras": []}
            self._write()

    def _stack(self, info: StackInfo) -> None:
        if info.model_family is None or "model" not in self.now or not info.baked:
            return
        self.now["loras"] = [
            {"path": str(lo.path), "model": lo.model_strength, "clip": lo.clip_strength, "on": lo.enabled}
            for lo in info.loras
        ]
        self._write()
        for lo in info.loras:  # a restored LoRA that was off last time is switched off again
            if lo.path in self._switch_off and lo.enabled:
                self._switch_off.discard(lo.path)
                self.backend.set_enabled(lo.id, False)

    # -- offered at the next start ---------------------------------------------------------------
    def _offer(self) -> None:
        if self._offered:
            return
        self._offered = True
        model = self.saved.get("model")
        if not isinstance(model, str) or not Path(model).is_file():
            return
        loras = [lo for lo in self.saved.get("loras", []) if isinstance(lo, dict)]  # type: ignore[attr-defined]
        words = f" with {len(loras)} LoRA{'s' if len(loras) != 1 else ''}" if loras else ""
        self.offer(f"Last time you used {Path(model).name}{words}.", lambda: self.restore())

    def restore(self) -> None:
        """Load the last session's model; its LoRAs follow once it is loaded."""
        model = self.saved.get("model")
        if isinstance(model, str):
            self._restoring = [lo for lo in self.saved.get("loras", []) if isinstance(lo, dict)]  # type: ignore[attr-defined]
            self.load(Path(model))

    def _loaded(self, info: ModelInfo) -> None:
        if self._restoring is None or str(info.path) != self.saved.get("model"):
            return
        loras, self._restoring = self._restoring, None
        for lo in loras:
            path, model, clip = lo.get("path"), lo.get("model"), lo.get("clip")
            if not isinstance(path, str) or not Path(path).is_file():
                continue
            strengths = [float(v) if isinstance(v, int | float) else 1.0 for v in (model, clip)]
            if lo.get("on") is False:
                self._switch_off.add(Path(path))
            self.backend.add_lora(path, strengths[0], strengths[1])
