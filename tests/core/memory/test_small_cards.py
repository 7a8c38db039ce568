"""Small cards keep what fits: no-VRAM mode is the user's choice, never the policy's (as ComfyUI).

A full-size SD1.5 UNet (1.6 GiB in fp16) is built on ``meta`` and planned for one 256x256 image on
cards of 256 MiB ... 2 GiB, through the same :class:`Placement` the window's simulated card and
``loadout run --vram-limit`` use: low-VRAM mode places what the card holds once the predicted
activations, two streamed modules in flight and the reserve are set aside, and streams the rest.
"""

from __future__ import annotations

import pytest

from core.memory.inference import Workload, activation_bytes
from core.memory.managed import looked_up_tables, module_sizes
from core.memory.planning import ModelState, plan_load_models
from core.memory.policy import MemorySettings, VramState, choose_vram_state
from core.memory.probes import FakeProbe
from core.models.unet import UNetModel
from core.models.unet_config import UNetConfig
from core.session.placement import Placement, PlacementConfig

MIB, GIB = 2**20, 2**30


@pytest.fixture(scope="module")
def sd15() -> ModelState:
    unet = UNetModel(UNetConfig.sd1(), device="meta").half()
    sizes = module_sizes(unet)
    return ModelState(
        "SD1.5 UNet", sum(s for _, s in sizes), module_sizes=sizes, looked_up=looked_up_tables(unet)
    )


@pytest.mark.parametrize("card", [256 * MIB, 1 * GIB, 2 * GIB - 1])
def test_a_small_simulated_card_keeps_what_fits_and_streams_the_rest(sd15: ModelState, card: int) -> None:
    placement = Placement(None, PlacementConfig(simulate_bytes=card))
    assert placement.decision is not None and placement.decision.state is VramState.LOW_VRAM
    assert placement.decision.automatic
    cfg = placement.manager.settings
    need = activation_bytes("sd1", Workload(256, 256, 1, 2, "cuda_flash"), 320)
    (step,) = plan_load_models([sd15], [], card, need, cfg)
    assert step.kind == "partial_load"
    resident, buffers = step.device_bytes_after, step.details["buffer_bytes"]
    assert isinstance(buffers, int) and resident > 0
    # what is resident, charged at low-VRAM headroom, the in-flight buffers and the activations fit
    assert round(resident * cfg.weight_headroom) + buffers + cfg.inference_reserve(need) <= card
    assert resident > card // 3  # most of the card holds weights: 256x256 activations are small


def test_no_vram_mode_only_when_the_user_asks() -> None:
    for total in (64 * MIB, 1 * GIB, 2 * GIB, 2.9 * GIB, 4 * GIB):
        card = FakeProbe(total=int(total))
        assert choose_vram_state(card.device, card.total()).state is not VramState.NO_VRAM
        asked = choose_vram_state(card.device, card.total(), MemorySettings(vram_state=VramState.NO_VRAM))
        assert asked.state is VramState.NO_VRAM and not asked.automatic
    placement = Placement(
        None, PlacementConfig(MemorySettings(vram_state=VramState.NO_VRAM), simulate_bytes=GIB)
    )
    assert placement.manager.settings.vram_state == "no_vram"


def test_the_plan_for_a_full_size_model_moves_nothing_twice(sd15: ModelState) -> None:
    """Planning the placed model again keeps it where it is (no churn each step)."""
    cfg = Placement(None, PlacementConfig(simulate_bytes=GIB)).manager.settings
    need = activation_bytes("sd1", Workload(256, 256, 1, 2, "cuda_flash"), 320)
    (first,) = plan_load_models([sd15], [], GIB, need, cfg)
    placed = ModelState(
        sd15.name, sd15.total_bytes, first.device_bytes_after, 1, False, sd15.module_sizes,
        frozenset(first.modules), sd15.looked_up,
    )  # fmt: skip
    (again,) = plan_load_models([placed], [], GIB - first.device_bytes_after, need, cfg)
    assert again.bytes == 0 and again.device_bytes_after == first.device_bytes_after
