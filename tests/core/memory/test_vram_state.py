"""One VRAM-state enum from the policy to the planner: the planner holds the policy's member, and
every spelling (the command line's, the planner's, ComfyUI's) reads back to it."""

from __future__ import annotations

import pytest

from core.memory.plan_records import PlanSettings
from core.memory.policy import SettingsError, VramState


@pytest.mark.parametrize("state", list(VramState))
def test_every_spelling_reads_back_to_the_same_member(state: VramState) -> None:
    for text in (state.option, state.value, state.name, state.name.lower()):
        assert VramState.parse(text) is state
    assert PlanSettings(vram_state=state).vram_state is state
    assert PlanSettings(vram_state=state.option).vram_state is state  # type: ignore[arg-type]


def test_the_planner_holds_the_policy_enum() -> None:
    assert PlanSettings(vram_state="lowvram").vram_state is VramState.LOW_VRAM  # type: ignore[arg-type]
    assert PlanSettings(vram_state="gpu_only").vram_state is VramState.HIGH_VRAM  # type: ignore[arg-type]
    assert PlanSettings().vram_state is VramState.NORMAL_VRAM
    with pytest.raises(SettingsError):
        PlanSettings(vram_state="turbo")  # type: ignore[arg-type]
