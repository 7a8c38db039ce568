"""What an image prompt by FLUX Redux asks for (ComfyUI's ``StyleModelApply``): plain values with
their checks; the engine is :mod:`core.generate.redux`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import LoadoutError
from core.values import REDUX_STRENGTH

#: ComfyUI's ``strength_type``: "multiply" scales the picture's tokens; "attn_bias" adds
#: ``log(strength)`` to the attention logits of every query on them
STRENGTH_TYPES = ("multiply", "attn_bias")


@dataclass(frozen=True)
class ReduxUse:
    """One picture given to a FLUX Redux style model, its strength and how the strength acts."""

    path: Path  # the style model file (flux1-redux-dev.safetensors)
    picture: Path
    strength: float = 1.0
    strength_type: str = "multiply"

    def __post_init__(self) -> None:
        REDUX_STRENGTH.check(self.strength)
        if self.strength_type not in STRENGTH_TYPES:
            raise LoadoutError(
                f"{self.strength_type!r} is not a Redux strength type",
                fix=f"Give one of {', '.join(STRENGTH_TYPES)}",
                code="bad_argument",
            )
