"""LoRA schedules: a LoRA's strength changing over the steps, as ComfyUI's hook keyframes.

A schedule is a list of keyframes, each a strength multiplier from a point of the sampling on
(``start``, a fraction of the schedule as ComfyUI's ``start_percent``: 0 the first step, 1 the
end); the LoRA's own strength is multiplied by the keyframe in force. The rules are ComfyUI's
(``HookKeyframeGroup``):

* the keyframes are ordered by start (equal starts keep their order); the first is in force from
  the first step even when it starts later;
* each keyframe starts at the sigma ``percent_to_sigma(start)``; at each new sigma the sampler
  evaluates (the positive and the negative prompt at one sigma count once; a second-order sampler's
  extra evaluations count), once the keyframe in force has been used for its guaranteed steps
  (1 unless given), the next keyframes whose start sigma is at or above the current sigma are
  taken, stopping at the first that guarantees a step;
* a keyframe that starts before the sampling's highest sigma (the second pass of a hires fix)
  guarantees no step;
* every sampling starts from the first keyframe again.

Text: ``1@0, 0.5@0.3, 0@0.7`` (``multiplier@start``, optionally ``:steps`` for the guaranteed
steps: ``0.5@0.3:2``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import LoadoutError


def _bad(what: str, why: str) -> LoadoutError:
    return LoadoutError(
        what,
        why=why,
        fix="Write the schedule as multiplier@start pairs, e.g. 1@0, 0.5@0.3 (start from 0 to 1)",
        code="bad_argument",
    )


@dataclass(frozen=True)
class Keyframe:
    """From ``start`` (0..1 of the sampling) on, the LoRA at ``strength`` times its own strength,
    for at least ``guarantee_steps`` sigmas."""

    strength: float
    start: float = 0.0
    guarantee_steps: int = 1

    def __post_init__(self) -> None:
        if not math.isfinite(self.strength) or not -20.0 <= self.strength <= 20.0:
            raise _bad("a LoRA keyframe's multiplier is out of range", f"{self.strength} is not in -20..20")
        if not math.isfinite(self.start) or not 0.0 <= self.start <= 1.0:
            raise _bad("a LoRA keyframe starts outside the sampling", f"start {self.start} is not in 0..1")
        if self.guarantee_steps < 0:
            raise _bad("a LoRA keyframe guarantees a negative number of steps", str(self.guarantee_steps))

    def text(self) -> str:
        steps = "" if self.guarantee_steps == 1 else f":{self.guarantee_steps}"
        return f"{self.strength:g}@{self.start:g}{steps}"


@dataclass(frozen=True)
class LoraSchedule:
    """The keyframes of one LoRA of the stack (``lora``: its name in the stack)."""

    lora: str
    keyframes: tuple[Keyframe, ...]

    def __post_init__(self) -> None:
        if not self.lora:
            raise _bad("a LoRA schedule names no LoRA", "the LoRA's name comes before '='")
        if not self.keyframes:
            raise _bad(f"the schedule of {self.lora!r} has no keyframe", "give at least one multiplier@start")
        ordered = tuple(sorted(self.keyframes, key=lambda k: k.start))  # stable: equal starts keep order
        object.__setattr__(self, "keyframes", ordered)

    def text(self) -> str:
        return ", ".join(k.text() for k in self.keyframes)


def parse_keyframes(text: str) -> tuple[Keyframe, ...]:
    """``1@0, 0.5@0.3:2`` -> keyframes (a bare number is a keyframe at 0)."""
    frames = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        value, _, rest = part.partition("@")
        start, _, steps = rest.partition(":")
        try:
            frames.append(Keyframe(float(value), float(start) if start else 0.0, int(steps) if steps else 1))
        except ValueError:
            raise _bad(f"the LoRA keyframe {part!r} cannot be read", "numbers are expected") from None
    if not frames:
        raise _bad("the LoRA schedule is empty", f"{text!r} has no keyframe")
    return tuple(frames)


def parse_schedule(text: str) -> LoraSchedule:
    """``name=1@0, 0.5@0.3`` -> a schedule of the LoRA ``name``."""
    name, sep, frames = text.rpartition("=")
    if not sep:
        raise _bad(f"the LoRA schedule {text!r} names no LoRA", "write name=multiplier@start, ...")
    return LoraSchedule(name.strip(), parse_keyframes(frames))


def format_schedules(schedules: Sequence[LoraSchedule]) -> str:
    """The PNG text: ``name: 1@0 0.5@0.3; other: ...``."""
    return "; ".join(f"{s.lora}: {' '.join(k.text() for k in s.keyframes)}" for s in schedules)


def read_schedules(text: str) -> tuple[LoraSchedule, ...]:
    """The inverse of :func:`format_schedules`."""
    out = []
    for part in text.split(";"):
        if not part.strip():
            continue
        name, sep, frames = part.partition(":")  # file names hold no colon; guaranteed steps do
        if not sep or not name.strip():
            raise _bad(f"the LoRA schedule {part.strip()!r} names no LoRA", "write name: multiplier@start")
        out.append(LoraSchedule(name.strip(), parse_keyframes(frames.replace(" ", ","))))
    return tuple(out)


class KeyframeClock:
    """Which keyframe is in force, sigma after sigma, for one sampling (see the module notes).

    ``starts``: each keyframe's start as a sigma (``percent_to_sigma(start)``), ``max_sigma`` the
    sampling's highest sigma."""

    def __init__(self, keyframes: Sequence[Keyframe], starts: Sequence[float], max_sigma: float) -> None:
        if len(keyframes) != len(starts) or not keyframes:
            raise ValueError("one start sigma per keyframe, at least one keyframe")
        self.keyframes = tuple(keyframes)
        self.starts = tuple(float(s) for s in starts)
        self.max_sigma = float(max_sigma)
        self.index = 0
        self.used = 0
        self.last_sigma: float | None = None

    def _guaranteed(self, i: int) -> int:
        return 0 if self.starts[i] > self.max_sigma else self.keyframes[i].guarantee_steps

    def strength(self, sigma: float) -> float:
        """The multiplier in force at ``sigma`` (a repeated sigma changes nothing)."""
        if sigma == self.last_sigma:
            return self.keyframes[self.index].strength
        if self.used >= self._guaranteed(self.index):
            for i in range(self.index + 1, len(self.keyframes)):
                if self.starts[i] < sigma:
                    break
                self.index, self.used = i, 0
                if self._guaranteed(i) > 0:
                    break
        self.used += 1
        self.last_sigma = sigma
        return self.keyframes[self.index].strength


__all__ = [
    "Keyframe",
    "KeyframeClock",
    "LoraSchedule",
    "format_schedules",
    "parse_keyframes",
    "parse_schedule",
    "read_schedules",
]
