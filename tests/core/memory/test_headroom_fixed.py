""" "The user fixed the inference headroom" is one explicit field the Placement sets from the
settings, read by the step placer, the measured test run, generation and the fit estimate."""

from __future__ import annotations

from core.memory.manager import MemoryManager
from core.memory.planning import PlanSettings
from core.memory.policy import MemorySettings, VramState
from core.memory.step_placer import default_memory_required
from core.session.placement import Placement, PlacementConfig

NORMAL = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0)


def test_a_placement_says_whether_the_user_fixed_the_headroom() -> None:
    fixed = Placement(None, PlacementConfig(NORMAL, simulate_bytes=64 << 20, inference_bytes=1 << 20))
    auto = Placement(None, PlacementConfig(NORMAL, simulate_bytes=64 << 20))
    assert fixed.manager.settings.headroom_fixed is True
    assert auto.manager.settings.headroom_fixed is False
    assert fixed.describe().memory is not None and fixed.describe().memory.headroom_fixed
    assert auto.describe().memory is not None and not auto.describe().memory.headroom_fixed


def test_the_explicit_field_wins_over_the_numbers() -> None:
    big_floor = PlanSettings(min_inference_bytes=2 << 30, reserve_bytes=0, headroom_fixed=False)
    manager = MemoryManager(lambda: 8 << 30, None, settings=big_floor)  # type: ignore[arg-type]
    assert default_memory_required(manager, [("sdxl", None)]) > 0  # predicted: nobody fixed it
    derived = PlanSettings(min_inference_bytes=2 << 30, reserve_bytes=0)  # no policy: from the numbers
    assert derived.headroom_fixed is True
