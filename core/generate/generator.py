"""Generation for one session, as the window uses it: the caches that make the second picture
fast (prompt conditioning, file hashes, preview maps) and the T5 tokenizer, found once on the
user's disk (their ComfyUI or Forge installs first, from the library's folders)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.generate.events import GenerateProgress, GenerateResult
from core.generate.request import ImageSettings
from core.generate.session_run import GenerateState, Output, generate
from core.session.session import Session
from core.session.slots import SlotId
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch, installs_from_origins

T5_FAMILIES = frozenset(
    {"sd3", "sd3.5-medium", "sd3.5-large", "flux-dev", "flux-schnell", "flux-fill", "chroma"}
)


class Generator:
    def __init__(self, session: Session, *, t5_tokenizer: Path | None = None) -> None:
        self.session = session
        self.state = GenerateState()
        self.t5_path = t5_tokenizer  # Settings: an explicit tokenizer file or folder

    def _search(self) -> T5TokenizerSearch:
        index = self.session.library.index
        origins = [r.origin for r in index.roots] if index is not None else []
        comfy, forge = installs_from_origins(origins)
        return T5TokenizerSearch(explicit=self.t5_path, comfyui_installs=comfy, forge_installs=forge)

    def generate(
        self,
        settings: ImageSettings,
        output: Output,
        progress: Callable[[GenerateProgress], None],
        check: Callable[[], None],
        init: np.ndarray | None = None,
    ) -> GenerateResult:
        loaded = self.session.loaded.get(SlotId.MAIN)
        if loaded is not None and loaded.family in T5_FAMILIES and self.state.t5_tokenizer is None:
            self.state.t5_tokenizer = T5Tokenizer.find(self._search())
        return generate(
            self.session, settings, output, state=self.state, progress=progress, check=check, init=init
        )
