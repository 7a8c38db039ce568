"""What a discrete-schedule model (SD1/SD2/SDXL) predicts, when the file says it: shapes never do.

Facts followed:

- ComfyUI (``supported_models.SDXL.model_type``, PR #5573; A1111 reads the same keys) reads two
  marker tensors at the top of the state dict, beside ``model.diffusion_model.``: ``v_pred`` means
  v-prediction, ``ztsnr`` with it a zero-terminal-SNR noise table (its ``zsnr``). ComfyUI's own
  save writes ``v_pred`` (an empty tensor) for v-prediction models. Files without the keys are
  epsilon in ComfyUI.
- ModelSpec metadata: ``modelspec.prediction_type`` (``epsilon`` | ``v``); ComfyUI's checkpoint
  save writes ``modelspec.predict_key`` with the same values.

:data:`PREDICTIONS` are the values a user may also give for a file that says nothing.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Prediction = Literal["eps", "v", "v-ztsnr"]
PREDICTIONS: Final[tuple[Prediction, ...]] = ("eps", "v", "v-ztsnr")
V_PRED_KEY: Final = "v_pred"
ZTSNR_KEY: Final = "ztsnr"
_METADATA_KEYS: Final = ("modelspec.prediction_type", "modelspec.predict_key")
_WORDS: Final[Mapping[str, Prediction]] = {
    "v": "v", "v_prediction": "v", "v-prediction": "v", "epsilon": "eps", "eps": "eps",
}  # fmt: skip


@dataclass(frozen=True)
class PredictionFact:
    """The prediction a file states, and what in the file states it."""

    prediction: Prediction
    source: str

    @property
    def v_prediction(self) -> bool:
        return self.prediction != "eps"

    @property
    def zero_terminal_snr(self) -> bool:
        return self.prediction == "v-ztsnr"


def stated_prediction(keys: Container[str], metadata: Mapping[str, str]) -> PredictionFact | None:
    """The prediction the file's marker keys or metadata state (the keys first), or None."""
    if V_PRED_KEY in keys:
        if ZTSNR_KEY in keys:
            return PredictionFact("v-ztsnr", "the file's v_pred and ztsnr keys")
        return PredictionFact("v", "the file's v_pred key")
    for key in _METADATA_KEYS:
        value = metadata.get(key)
        word = _WORDS.get(value.strip().lower()) if isinstance(value, str) else None
        if word is not None:
            return PredictionFact(word, f"{key} is {value!r}")
    return None


def variant_word(prediction: Prediction) -> str | None:
    """The detection variant a prediction shows as (``v-prediction``; none for epsilon)."""
    return None if prediction == "eps" else "v-prediction"
