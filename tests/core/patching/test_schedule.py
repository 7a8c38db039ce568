"""LoRA schedules: ComfyUI's hook-keyframe rules (goldens from ComfyUI's own code), the text forms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.patching.schedule import (
    Keyframe,
    KeyframeClock,
    LoraSchedule,
    format_schedules,
    parse_schedule,
    read_schedules,
)

GOLDEN = json.loads((Path(__file__).parent / "golden_hook_keyframes.json").read_text())
CASES = sorted(k for k in GOLDEN if not k.startswith("_"))


@pytest.mark.parametrize("case", CASES)
def test_the_keyframe_in_force_is_comfyuis(case: str) -> None:
    c = GOLDEN[case]
    frames = [Keyframe(s, p, g) for s, p, g in c["keyframes"]]
    # the schedule orders its keyframes by start; the golden's starts follow the given order
    order = sorted(range(len(frames)), key=lambda i: frames[i].start)
    clock = KeyframeClock([frames[i] for i in order], [c["starts"][i] for i in order], c["max_sigma"])
    got = [clock.strength(sigma) for sigma in c["calls"]]
    assert got == pytest.approx(c["strengths"], abs=0)


def test_schedules_read_back_from_their_text() -> None:
    a = parse_schedule("detail_tweaker=1@0, 0.5@0.3:2, 0@0.7")
    b = parse_schedule("style = 0.2@0.5")
    assert [k.text() for k in a.keyframes] == ["1@0", "0.5@0.3:2", "0@0.7"]
    text = format_schedules([a, b])
    assert text == "detail_tweaker: 1@0 0.5@0.3:2 0@0.7; style: 0.2@0.5"
    assert read_schedules(text) == (a, b)
    # keyframes given out of order are ordered by start, equal starts keep their order
    c = LoraSchedule("x", (Keyframe(0.0, 0.9), Keyframe(1.0, 0.1), Keyframe(0.5, 0.1)))
    assert [k.strength for k in c.keyframes] == [1.0, 0.5, 0.0]


@pytest.mark.parametrize(
    "text, words",
    [
        ("1@0", "names no LoRA"),
        ("x=", "empty"),
        ("x=a@b", "cannot be read"),
        ("x=1@1.5", "outside the sampling"),
        ("x=50@0", "out of range"),
        ("x=nan@0", "out of range"),
        ("=1@0", "names no LoRA"),
    ],
)
def test_bad_schedules_are_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(LoadoutError, match=words):
        parse_schedule(text)
