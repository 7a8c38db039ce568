"""The preprocessor records and the one call that runs them by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from core.errors import LoadoutError
from core.preprocess import edges
from core.values import NumberRange


class UnknownPreprocessorError(LoadoutError):
    code = "bad_argument"


@dataclass(frozen=True)
class Setting:
    """One number a preprocessor takes: its name, default and allowed range."""

    name: str
    default: float
    limits: NumberRange


Run = Callable[[np.ndarray, Mapping[str, float]], np.ndarray]


@dataclass(frozen=True)
class Preprocessor:
    name: str
    description: str
    run: Run
    settings: tuple[Setting, ...] = ()

    def resolved(self, given: Mapping[str, float]) -> dict[str, float]:
        """The settings with ``given`` over the defaults, each checked; an unknown name is refused."""
        known = {s.name: s for s in self.settings}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise LoadoutError(
                f"the {self.name} preprocessor has no setting {', '.join(unknown)}",
                why=f"its settings are {', '.join(known) or 'none'}",
                fix="Use one of its settings",
                code="bad_argument",
            )
        return {n: s.limits.check(given.get(n, s.default)) for n, s in known.items()}


def _threshold(name: str) -> NumberRange:
    return NumberRange(f"the canny {name} threshold", 0, 1000, integer=True)


def _registry(*records: Preprocessor) -> Mapping[str, Preprocessor]:
    out: dict[str, Preprocessor] = {}
    for r in records:
        if r.name in out:
            raise ValueError(f"preprocessor {r.name!r} registered twice")
        out[r.name] = r
    return MappingProxyType(out)


PREPROCESSORS: Mapping[str, Preprocessor] = _registry(
    Preprocessor(
        "canny", "white edges on black (OpenCV's Canny on the grey picture)", edges.canny,
        (Setting("low", 100, _threshold("low")), Setting("high", 200, _threshold("high"))),
    ),
    Preprocessor(
        "lineart", "white line drawing on black (difference of Gaussians, thresholded)", edges.lineart,
        (Setting("sigma", 1.0, NumberRange("the lineart line width", 0.3, 8.0)),),
    ),
    Preprocessor(
        "softedge", "soft white edges on black (Sobel gradient strength, normalized)", edges.softedge,
        (Setting("blur", 1.5, NumberRange("the softedge blur", 0.0, 8.0)),),
    ),
)  # fmt: skip


def find_preprocessor(name: str) -> Preprocessor:
    found = PREPROCESSORS.get(name.strip().lower())
    if found is None:
        raise UnknownPreprocessorError(
            f"there is no preprocessor {name!r}",
            why=f"the preprocessors are {', '.join(PREPROCESSORS)}",
            fix="Use one of them (depth and pose need model files and are not supported yet)",
        )
    return found


def preprocess(name: str, picture: np.ndarray, settings: Mapping[str, float] | None = None) -> np.ndarray:
    """The hint (H, W, 3) uint8 that preprocessor ``name`` makes of ``picture`` ((H, W, 3) uint8)."""
    record = find_preprocessor(name)
    if picture.ndim != 3 or picture.shape[2] < 3 or picture.dtype != np.uint8:
        raise LoadoutError(
            f"a preprocessor takes an RGB picture, not an array of {picture.shape} {picture.dtype}",
            fix="Read the picture as RGB",
            code="bad_argument",
        )
    hint = record.run(np.ascontiguousarray(picture[..., :3]), record.resolved(settings or {}))
    assert hint.shape == (*picture.shape[:2], 3) and hint.dtype == np.uint8
    return hint
