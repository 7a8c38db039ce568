"""``--device cuda:1`` names the second card, not the first (it used to match on the kind alone),
and the placement places on that very card."""

from __future__ import annotations

import pytest

from core.errors import LoadoutError
from core.memory.devices import cpu_device, nvidia_device, parse_device_name, pick_device, rocm_device
from core.memory.probes import FakeProbe
from core.session import placement as placement_module
from core.session.placement import Placement

GIB = 2**30
TWO_CARDS = [
    nvidia_device(0, "NVIDIA GeForce RTX 3060", 12 * GIB, (8, 6)),
    nvidia_device(1, "NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9)),
    cpu_device(32 * GIB),
]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("cuda", ("cuda", None)), ("cuda:1", ("cuda", 1)), ("CUDA:0", ("cuda", 0)), ("cpu", ("cpu", None)),
     ("mps", ("mps", None)), ("xpu:2", ("xpu", 2)), (" cuda:12 ", ("cuda", 12))],
)  # fmt: skip
def test_device_names_parse(text: str, parsed: tuple[str, int | None]) -> None:
    assert parse_device_name(text) == parsed


@pytest.mark.parametrize("text", ["graphics", "cuda:x", "cuda:-1", "cuda:", "", "cuda:1:2"])
def test_a_bad_device_name_is_a_clear_error(text: str) -> None:
    with pytest.raises(LoadoutError) as err:
        parse_device_name(text)
    assert err.value.code == "bad_device" and "cuda:N" in (err.value.fix or "")


def test_the_index_picks_the_card() -> None:
    assert pick_device("cuda:1", TWO_CARDS) is TWO_CARDS[1]
    assert pick_device("cuda:0", TWO_CARDS) is TWO_CARDS[0]
    assert pick_device("cuda", TWO_CARDS) is TWO_CARDS[0]
    assert pick_device("cuda:2", TWO_CARDS) is None
    assert pick_device("cpu", TWO_CARDS) is TWO_CARDS[2]
    amd = [
        rocm_device(0, "AMD Radeon RX 7900 XTX", 24 * GIB, "gfx1100"),
        rocm_device(1, "AMD", 16 * GIB, "gfx1030"),
    ]
    assert pick_device("cuda:1", amd) is amd[1]  # torch calls ROCm cards cuda


def test_placement_places_on_the_named_card(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manager's target is the card's own torch device ("cuda:1"), not "cuda" (the current
    card). A FakeProbe stands in for the card's memory readings (no CUDA here)."""
    monkeypatch.setattr(placement_module, "probe_for", lambda d: FakeProbe(d.total_bytes, device=d))
    assert Placement(TWO_CARDS[1]).manager.device == "cuda:1"
    assert Placement(TWO_CARDS[0]).manager.device == "cuda:0"


def test_cards_computing_in_fp32_ask_for_fp32_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pascal and GTX 16-series compute in fp32: the activation room asked for is counted at
    4 bytes an element there (it was 2 everywhere)."""
    from core.memory.inference import network_profile
    from core.memory.step_placer import default_memory_required
    from core.models.unet import UNetModel
    from core.models.unet_config import UNetConfig

    monkeypatch.setattr(placement_module, "probe_for", lambda d: FakeProbe(d.total_bytes, device=d))
    gtx = Placement(nvidia_device(0, "NVIDIA GeForce GTX 1660 SUPER", 6 * GIB, (7, 5)))
    rtx = Placement(TWO_CARDS[0])
    assert gtx.compute_bytes == 4 and rtx.compute_bytes == 2
    unet = UNetModel(UNetConfig.sd1(), device="meta")
    profiles = [network_profile("sd1", unet)]
    fp32 = default_memory_required(gtx.manager, profiles, gtx.compute_bytes)
    fp16 = default_memory_required(rtx.manager, profiles, rtx.compute_bytes)
    assert fp32 == 2 * fp16 > 0
