"""Memory planning on numbers (simulated 4 GiB / 24 GiB cards), the event log, and the manager
driven by a fake probe (a closure over an int) and a fake mover that records its calls."""

from __future__ import annotations

import gc
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from enum import Enum

import pytest
from torch import nn

from core.errors import InterruptedByUser
from core.memory.events import GIB, EventLog, MemoryEvent, gib
from core.memory.managed import ManagedModel
from core.memory.manager import MemoryManager, NotEnoughMemoryError
from core.memory.planning import (
    ModelState,
    PlanSettings,
    choose_modules_to_free,
    plan_free,
    plan_load,
    plan_load_models,
)

# Realistic sizes (bytes on disk / in memory at their usual dtype).
SD15_UNET, SDXL_UNET, FLUX = 1_720_000_000, 5_140_000_000, 23_800_000_000
CLIP_L, T5_XXL, VAE = 250_000_000, 9_500_000_000, 170_000_000
CARD_4, CARD_24 = 4 * GIB, 24 * GIB
RESERVE = PlanSettings().inference_reserve(0)  # the default floor (ComfyUI's 0.8 GiB + 400 MiB)


def blocks(total: int, n: int) -> tuple[tuple[str, int], ...]:
    """``n`` equal modules (the remainder goes to block 0)."""
    size, extra = divmod(total, n)
    return tuple((f"block{i}", size + (extra if i == 0 else 0)) for i in range(n))


def state(
    name: str, total: int, n: int = 20, *, loaded: int = 0, last_used: int = 0, pinned: bool = False
) -> ModelState:
    """A model split in ``n`` blocks with its first ``loaded`` blocks on the device."""
    mods = blocks(total, n)
    on = frozenset(m for m, _ in mods[:loaded])
    nbytes = sum(s for m, s in mods if m in on)
    return ModelState(name, total, nbytes, last_used, pinned, mods, on)


def full(name: str, total: int, n: int = 20, last_used: int = 0) -> ModelState:
    return state(name, total, n, loaded=n, last_used=last_used)


# --- eviction --------------------------------------------------------------------------------------


def test_best_fit_module_choice_frees_just_enough_with_few_modules() -> None:
    mods = [("a", 500), ("b", 300), ("c", 200), ("d", 100)]
    assert choose_modules_to_free(mods, 250) == [("b", 300)]
    assert choose_modules_to_free(mods, 650) == [("a", 500), ("c", 200)]
    assert choose_modules_to_free(mods, 1) == [("d", 100)]
    assert sum(s for _, s in choose_modules_to_free(mods, 5000)) == 1100
    assert choose_modules_to_free(mods, 0) == []


def test_eviction_order_partial_first_then_lru_then_smallest() -> None:
    sd15 = state("SD1.5 UNet", SD15_UNET, 20, loaded=10, last_used=5)  # partly offloaded, recent
    models = [
        full("T5-XXL", T5_XXL, 24, last_used=3),
        full("CLIP-L", CLIP_L, 12, last_used=1),
        full("VAE", VAE, 10, last_used=1),
        sd15,
    ]
    plan = plan_free(models, 1_300_000_000, making_room_for="SDXL UNet (4.79 GiB)")
    assert [(s.kind, s.model, s.bytes) for s in plan.steps] == [
        ("unload", "SD1.5 UNet", 860_000_000),
        ("unload", "VAE", VAE),  # tied with CLIP-L on last use: the smaller goes first
        ("unload", "CLIP-L", CLIP_L),
        ("partial_unload", "T5-XXL", 395_833_333),  # one block (the smallest) covers the last 20 MB
    ]
    assert plan.possible and plan.bytes_freed == 1_675_833_333 and plan.shortfall_bytes == 0
    reasons = [s.reason for s in plan.steps]
    assert reasons[0] == (
        "Evicted SD1.5 UNet (0.80 GiB) to make room for SDXL UNet (4.79 GiB); "
        "it was already partly offloaded, so it goes first."
    )
    assert "smallest" in reasons[1] and "least recently used of those left" in reasons[2]
    assert reasons[3].startswith("Moved 0.37 GiB of T5-XXL (1 of 24 modules on the device) back to the CPU")
    assert [s.device_bytes_after for s in plan.steps] == [0, 0, 0, T5_XXL - 395_833_333]


def test_partial_unload_before_full_unload() -> None:
    sd15 = full("SD1.5 UNet", SD15_UNET, 20, last_used=1)
    plan = plan_free([sd15, full("CLIP-L", CLIP_L, last_used=2)], 100_000_000)
    (step,) = plan.steps
    assert (step.kind, step.model, step.bytes, len(step.modules)) == (
        "partial_unload",
        "SD1.5 UNet",
        172_000_000,
        2,
    )
    assert "least recently used" in step.reason and step.device_bytes_after == SD15_UNET - 172_000_000
    no_partial = plan_free([sd15], 100_000_000, allow_partial=False)
    assert [(s.kind, s.bytes) for s in no_partial.steps] == [("unload", SD15_UNET)]


def test_never_evicts_what_the_caller_needs_and_reports_the_shortfall() -> None:
    models = [
        full("SDXL UNet", SDXL_UNET, last_used=1),
        full("CLIP-L", CLIP_L, last_used=1),
        ModelState("VAE", VAE, VAE, 0, True, blocks(VAE, 4), frozenset(m for m, _ in blocks(VAE, 4))),
    ]
    plan = plan_free(models, 6 * GIB, keep={"SDXL UNet"})
    assert [s.model for s in plan.steps] == ["CLIP-L"]  # VAE is pinned, SDXL kept
    assert not plan.possible and plan.shortfall_bytes == 6 * GIB - CLIP_L
    assert plan.shortfall_reason({"SDXL UNet"}) == (
        "Could not free 6.00 GiB: only 0.23 GiB could be moved off the device, 5.77 GiB short; "
        "SDXL UNet is in use."
    )
    assert plan_free(models, 0).steps == ()


# --- placement -------------------------------------------------------------------------------------


def test_full_load_when_it_fits_with_headroom_and_inference_reserve() -> None:
    plan = plan_load(state("SD1.5 UNet", SD15_UNET), CARD_4, 0)
    assert (plan.kind, plan.device_bytes, plan.streamed_bytes, len(plan.device_modules)) == (
        "load",
        SD15_UNET,
        0,
        20,
    )
    assert plan.reason == (
        "Loaded SD1.5 UNet fully (1.60 GiB): it fits in the 4.00 GiB free once 1.19 GiB "
        "is kept for inference."
    )
    # The same model with 1 byte less than total x 1.1 + reserve no longer fits fully.
    edge = int(SD15_UNET * 1.1) + RESERVE
    assert plan_load(state("SD1.5 UNet", SD15_UNET), edge, 0).kind == "load"
    assert plan_load(state("SD1.5 UNet", SD15_UNET), edge - 1, 0).kind == "partial_load"


def test_sdxl_on_a_4_gib_card_loads_partially_within_the_budget() -> None:
    size = SDXL_UNET // 40
    plan = plan_load(state("SDXL UNet", SDXL_UNET, 40), CARD_4, 0)
    # (free - reserve - 2 streamed modules in flight) / (1.1 x module) = 19.5 -> 19 modules.
    assert plan.kind == "partial_load" and len(plan.device_modules) == 19
    assert plan.device_bytes == 19 * size and plan.streamed_bytes == 21 * size
    assert plan.buffer_bytes == 2 * size and plan.reserve_bytes == RESERVE
    assert (
        plan.device_bytes * 1.1 + RESERVE + 2 * size
        <= CARD_4
        < (plan.device_bytes + size) * 1.1 + RESERVE + 2 * size
    )
    assert plan.reason == (
        "Loaded 2.27 GiB of SDXL UNet (19 of 40 modules) and left 2.51 GiB on the CPU to stream at "
        "each step: all 4.79 GiB do not fit in the 4.00 GiB free once 1.19 GiB is kept for "
        "inference."
    )
    (step,) = plan.steps
    assert (
        step.bytes == 19 * size
        and step.modules == plan.device_modules
        and step.details["streamed_bytes"] == 21 * size
    )


def test_modules_are_placed_smallest_first_while_they_fit() -> None:
    """The many small modules stay resident and the few large ones stream: streaming costs about
    150 us of Python per streamed module on a real card (an H200 streaming SDXL's UNet at 25 %
    resident ran 1.9x the resident time largest-first, 1.17x smallest-first; docs/benchmarks.md)."""
    mods = (("s", 200), ("m", 600), ("l", 1000), ("xl", 800), ("xs", 400))
    model = ModelState("toy", 3000, module_sizes=mods)
    bare = PlanSettings(min_inference_bytes=0, reserve_bytes=0, headroom=1.0, stream_buffers=0)
    plan = plan_load(model, 1300, 0, bare)
    # s + xs + m = 1200 placed, xl skipped (1200 + 800 > 1300); the plan lists them largest first
    assert plan.device_modules == ("m", "xs", "s") and plan.to_load == ("m", "xs", "s")
    assert plan_load(model, 2000, 0, bare).device_modules == ("xl", "m", "xs", "s")
    assert plan_load(model, 2999, 0, bare).device_modules == ("xl", "m", "xs", "s")  # l streams alone
    # With room for two streamed modules in flight (the two largest left), less is placed.
    buffered = PlanSettings(min_inference_bytes=0, reserve_bytes=0, headroom=1.0, stream_buffers=2)
    # l + xl in flight (1800) + s + xs (600) = 2400; m would make it 3000
    assert plan_load(model, 2500, 0, buffered).device_modules == ("xs", "s")
    assert plan_load(model, 1799, 0, buffered).kind == "refuse"  # 1000 + 800 streamed at once


def test_models_of_one_call_share_one_streaming_region_when_a_later_one_would_be_refused() -> None:
    """SD3's three text encoders on a small card (found by the SD3 ControlNet CLI test): placed in
    turn, CLIP-L took the room CLIP-G needed to stream at all. They run one at a time, so their
    in-flight buffers can share one region: planned again with the largest kept free, all run."""
    buffered = PlanSettings(min_inference_bytes=0, reserve_bytes=0, headroom=1.0, stream_buffers=2)
    first = ModelState("first", 1000, module_sizes=tuple((f"f{i}", 100) for i in range(10)))
    second = ModelState(
        "second", 2000, module_sizes=(("big0", 400), ("big1", 400), *((f"s{i}", 80) for i in range(15)))
    )
    third = ModelState("third", 300, module_sizes=tuple((f"t{i}", 50) for i in range(6)))
    steps = plan_load_models([first, second, third], [], 1000, 0, buffered)
    by = {s.model: s for s in steps}
    assert "refuse" not in {s.kind for s in steps}, [s.reason for s in steps]
    # the region for second's two 400-byte modules stays free of every model's weights
    assert sum(s.bytes for s in steps if s.kind in ("load", "partial_load")) <= 1000 - 800
    assert by["second"].kind == "partial_load"
    # alone, first fits whole as before (the shared region only when a call refuses a model)
    assert plan_load_models([first], [], 1000, 0, buffered)[0].bytes == 1000
    # and a call that refuses nothing is planned as before
    roomy = plan_load_models([first, third], [], 2000, 0, buffered)
    assert [s.kind for s in roomy] == ["load", "load"]


def test_a_smaller_budget_sends_the_fewest_largest_resident_modules_back() -> None:
    mods = (("s", 200), ("m", 600), ("l", 1000))
    bare = PlanSettings(min_inference_bytes=0, reserve_bytes=0, headroom=1.0, stream_buffers=0)
    loaded = ModelState("toy", 1800, 1800, module_sizes=mods, loaded_modules=frozenset({"s", "m", "l"}))
    plan = plan_load(loaded, 800, 0, bare)  # room 800 + 1800 resident: 2600 > 1800, all stay
    assert plan.kind == "keep"
    plan = plan_load(loaded, 0, 900, bare)  # 900 wanted for inference: l (the fewest, largest) goes
    assert plan.to_unload == ("l",) and plan.device_modules == ("m", "s")
    after = ModelState("toy", 1800, 800, module_sizes=mods, loaded_modules=frozenset({"s", "m"}))
    assert plan_load(after, 100, 0, bare).to_load == ()  # planned again: nothing moves


def test_low_vram_is_more_conservative_than_normal() -> None:
    model = state("SDXL UNet", SDXL_UNET, 40)
    normal = plan_load(model, CARD_4, 0)
    low = plan_load(model, CARD_4, 0, PlanSettings(vram_state="low_vram"))
    # (free - reserve - 2 modules in flight) / (1.3 x module) = 16.5 -> 16, against 19 at 1.1x.
    assert low.kind == "partial_load" and len(low.device_modules) == 16 < len(normal.device_modules) == 19
    assert "low-VRAM mode counts weights at 1.3x" in low.reason


def test_flux_on_a_24_gib_card_evicts_the_text_encoders_then_loads_partially() -> None:
    loaded = [
        full("T5-XXL", T5_XXL, 24, last_used=1),
        full("CLIP-L", CLIP_L, 12, last_used=1),
        full("VAE", VAE, 10, last_used=1),
    ]
    free = CARD_24 - T5_XXL - CLIP_L - VAE
    flux = state("Flux", FLUX, 57, last_used=2, pinned=True)
    steps = plan_load_models([flux], loaded, free, 2 * GIB)
    assert [(s.kind, s.model, s.bytes) for s in steps[:3]] == [
        ("unload", "VAE", VAE),
        ("unload", "CLIP-L", CLIP_L),
        ("unload", "T5-XXL", T5_XXL),
    ]
    assert all("to make room for Flux (22.17 GiB)" in s.reason for s in steps[:3])
    load = steps[3]
    size = FLUX // 57
    reserve = 2 * GIB + 400 * 1024**2
    assert load.kind == "partial_load" and load.bytes == load.device_bytes_after
    assert load.device_bytes_after * 1.1 + reserve + 2 * size <= CARD_24
    assert load.details["streamed_bytes"] == FLUX - load.device_bytes_after > 0
    assert len(steps) == 4


def test_high_vram_never_offloads() -> None:
    high = PlanSettings(vram_state="high_vram")
    flux = plan_load(state("Flux", FLUX, 57), CARD_24, 0, high)
    assert flux.kind == "refuse" and flux.device_bytes == 0 and flux.streamed_bytes == 0
    assert flux.reason.startswith("Cannot load Flux (22.17 GiB): high-VRAM mode never streams weights")
    # Nothing is evicted for a model that would be refused anyway.
    steps = plan_load_models(
        [state("Flux", FLUX, 57)], [full("T5-XXL", T5_XXL, 24)], CARD_24 - T5_XXL, 0, high
    )
    assert [s.kind for s in steps] == ["refuse"]
    # A model that fits is loaded fully; room is made by whole evictions, never partial ones.
    sd15 = full("SD1.5 UNet", SD15_UNET, 20, last_used=1)
    free = 6 * GIB  # SDXL needs 5.14 GB x 1.1 + 1.19 GiB: 0.49 GB short
    steps = plan_load_models([state("SDXL UNet", SDXL_UNET, 40)], [sd15], free, 0, high)
    assert [(s.kind, s.model) for s in steps] == [("unload", "SD1.5 UNet"), ("load", "SDXL UNet")]
    # A model already fully resident stays, even when the free memory left is below the 10% margin.
    resident = plan_load(full("SDXL UNet", SDXL_UNET, 40), RESERVE + 1, 0, high)
    assert (resident.kind, resident.device_bytes) == ("keep", SDXL_UNET)
    normal = plan_load_models([state("SDXL UNet", SDXL_UNET, 40)], [sd15], free, 0)
    assert [s.kind for s in normal] == ["partial_unload", "load"]


def test_no_vram_streams_everything() -> None:
    plan = plan_load(state("SDXL UNet", SDXL_UNET, 40), CARD_24, 0, PlanSettings(vram_state="no_vram"))
    assert plan.kind == "partial_load" and plan.device_modules == () and plan.device_bytes == 0
    assert plan.streamed_bytes == SDXL_UNET and plan.to_load == ()
    assert plan.reason == (
        "Left all of SDXL UNet (4.79 GiB) on the CPU to stream at each step: no-VRAM mode keeps "
        "weights off the device."
    )
    resident = state("SDXL UNet", SDXL_UNET, 40, loaded=5)
    again = plan_load(resident, CARD_24, 0, PlanSettings(vram_state="no_vram"))
    assert [(s.kind, s.bytes) for s in again.steps] == [
        ("unload", 5 * (SDXL_UNET // 40)),
        ("partial_load", 0),
    ]


def test_disabled_and_shared_states() -> None:
    cpu = PlanSettings(vram_state="disabled")
    plan = plan_load(state("SDXL UNet", SDXL_UNET), 0, 0, cpu)
    assert (plan.kind, plan.device_bytes, plan.streamed_bytes) == ("keep", 0, 0)
    assert "the GPU is disabled" in plan.reason
    steps = plan_load_models([state("SDXL UNet", SDXL_UNET)], [full("CLIP-L", CLIP_L)], 0, 0, cpu)
    assert [s.kind for s in steps] == ["keep"]
    shared = plan_load_models(
        [state("Flux", FLUX)], [full("T5-XXL", T5_XXL)], GIB, 0, PlanSettings(vram_state="mps")
    )
    assert [(s.kind, s.bytes) for s in shared] == [("load", FLUX)] and "shares system memory" in shared[
        0
    ].reason


def test_impossible_request_is_refused_with_a_reason_and_evicts_nothing() -> None:
    steps = plan_load_models(
        [state("SDXL UNet", SDXL_UNET, 40)], [full("CLIP-L", CLIP_L)], GIB + CLIP_L, 8 * GIB
    )
    (refuse,) = steps
    assert refuse.kind == "refuse" and refuse.bytes == 0
    assert refuse.reason.startswith(
        "Cannot run SDXL UNet: even streaming all its weights needs 8.63 GiB on the device "
        "(8.00 GiB for activations, 0.24 GiB for up to 2 streamed modules in flight, "
        "0.39 GiB kept for other programs)"
    )
    d = refuse.details  # what a caller needs to name a size or batch that fits
    assert d["activation_bytes"] == 8 * GIB and d["kept_bytes"] == PlanSettings().reserve_bytes
    assert d["room_bytes"] == GIB + CLIP_L and d["stream_buffer_bytes"] == 2 * (SDXL_UNET // 40)


def test_planning_a_placed_model_again_moves_nothing_and_shrinks_when_inference_grows() -> None:
    first = plan_load(state("SDXL UNet", SDXL_UNET, 40), CARD_4, 0)
    placed = ModelState(
        "SDXL UNet",
        SDXL_UNET,
        first.device_bytes,
        1,
        True,
        blocks(SDXL_UNET, 40),
        frozenset(first.device_modules),
    )
    again = plan_load(placed, CARD_4 - first.device_bytes, 0)
    assert [(s.kind, s.bytes) for s in again.steps] == [
        ("partial_load", 0)
    ] and again.device_modules == first.device_modules
    bigger = plan_load(placed, CARD_4 - first.device_bytes, 2 * GIB)
    shrink, load = bigger.steps
    assert shrink.kind == "partial_unload" and shrink.bytes == first.device_bytes - bigger.device_bytes > 0
    assert set(bigger.device_modules) < set(first.device_modules) and load.bytes == 0
    assert "kept for inference" in shrink.reason
    done = full("CLIP-L", CLIP_L)
    keep = plan_load(done, CARD_4 - CLIP_L, 0)
    assert (keep.kind, keep.reason) == (
        "keep",
        "CLIP-L is already fully on the device (0.23 GiB); nothing moved.",
    )


def test_plan_load_models_evicts_the_lru_model_with_the_reference_sentence() -> None:
    loaded = [ModelState("SD1.5 UNet", SD15_UNET, SD15_UNET, 1), full("CLIP-L", CLIP_L, 10, last_used=2)]
    sdxl = state("SDXL UNet", SDXL_UNET, 40, last_used=3, pinned=True)
    need = int(SDXL_UNET * 1.1) + 1 + RESERVE
    steps = plan_load_models([sdxl], loaded, need - SD15_UNET - 25_000_000, 0)
    assert [(s.kind, s.model, s.bytes) for s in steps] == [
        ("unload", "SD1.5 UNet", SD15_UNET),
        ("partial_unload", "CLIP-L", 25_000_000),
        ("load", "SDXL UNet", SDXL_UNET),
    ]
    assert steps[0].reason == (
        "Evicted SD1.5 UNet (1.60 GiB) to make room for SDXL UNet (4.79 GiB); it was the least recently used."
    )


def test_models_loaded_together_share_the_room_in_order_and_one_inference_reserve() -> None:
    clip, vae, sdxl = state("CLIP-L", CLIP_L, 10), state("VAE", VAE, 5), state("SDXL UNet", SDXL_UNET, 40)
    assert [(s.kind, s.bytes) for s in plan_load_models([sdxl, clip, vae], [], CARD_24, 0)] == [
        ("load", SDXL_UNET),
        ("load", CLIP_L),
        ("load", VAE),
    ]
    free = RESERVE + round(CLIP_L * 1.1) + round(VAE * 1.1)  # the reserve once, not once per model
    assert [s.kind for s in plan_load_models([clip, vae], [], free, 0)] == ["load", "load"]
    tight = RESERVE + CLIP_L + round(VAE * 1.1) - 1  # the VAE sees what CLIP-L left, not the first figure
    assert [s.kind for s in plan_load_models([clip, vae], [], tight, 0)] == ["load", "partial_load"]
    assert [s.kind for s in plan_load_models([clip, vae, sdxl], [], free + GIB, 0)] == [
        "load",
        "load",
        "partial_load",
    ]


def test_settings_and_states_are_validated() -> None:
    class VramState(Enum):  # the policy layer's enum, by name
        NORMAL_VRAM = "normal"
        NO_VRAM = "no-vram"

    assert PlanSettings(vram_state=VramState.NORMAL_VRAM).vram_state == "normal"  # type: ignore[arg-type]
    assert PlanSettings(vram_state=VramState.NO_VRAM.value).vram_state == "no_vram"
    assert PlanSettings(vram_state="HIGH_VRAM").vram_state == "high_vram"
    with pytest.raises(ValueError, match="unknown VRAM state"):
        PlanSettings(vram_state="turbo")
    with pytest.raises(ValueError, match="add up to"):
        ModelState("x", 100, module_sizes=(("a", 10),))
    with pytest.raises(ValueError, match="loaded_bytes differs"):
        ModelState("x", 100, 50, module_sizes=(("a", 60), ("b", 40)), loaded_modules=frozenset({"b"}))
    with pytest.raises(ValueError, match="either fully loaded"):
        ModelState("x", 100, 50)


# --- events ----------------------------------------------------------------------------------------


def test_event_log_is_a_bounded_ring_with_listeners(caplog: pytest.LogCaptureFixture) -> None:
    clock = iter(range(100))
    log = EventLog(3, clock=lambda: float(next(clock)))
    seen: list[MemoryEvent] = []
    unsubscribe = log.subscribe(seen.append)

    def broken(event: MemoryEvent) -> None:
        raise RuntimeError("listener bug")

    log.subscribe(broken)  # a failing listener is logged, not fatal
    for i in range(5):
        log.emit("load", f"m{i}", i, f"loaded m{i}")
    assert [e.model for e in log.events()] == ["m2", "m3", "m4"] and log.total == 5 and len(log) == 3
    assert [e.timestamp for e in log.events()] == [2.0, 3.0, 4.0]
    assert [e.model for e in log.since(3)] == ["m3", "m4"] and log.since(5) == ()
    assert len(seen) == 5 and caplog.text.count("a memory event listener failed") == 5
    unsubscribe()
    log.emit("keep", "m5", 0, "kept")
    assert len(seen) == 5
    with pytest.raises(ValueError, match="unknown memory event kind"):
        MemoryEvent(0.0, "evict", "m", 0, None, "")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        log.events()[0].details["x"] = 1  # type: ignore[index]
    assert gib(SD15_UNET) == "1.60 GiB" and gib(SDXL_UNET) == "4.79 GiB"


def test_event_log_appends_from_many_threads() -> None:
    log = EventLog(1000)
    counted: list[int] = []
    log.subscribe(lambda e: counted.append(e.bytes))

    def work(t: int) -> None:
        for i in range(500):
            log.emit("load", f"t{t}", i, "x")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert log.total == 2000 and len(log) == 1000 and len(counted) == 2000


# --- manager ---------------------------------------------------------------------------------------


class Card:
    def __init__(self, free: int) -> None:
        self.free = free


class FakeMover:
    """Moves nothing; tracks what would be on the device and updates the simulated card."""

    def __init__(self, card: Card, *, check: Callable[[], None] | None = None, delay: float = 0.0) -> None:
        self.card, self.check, self.delay, self.withhold = card, check, delay, 0
        self.calls: list[tuple[str, str, tuple[str, ...], int]] = []
        self.on_device: dict[str, set[str]] = defaultdict(set)
        self.stopped: list[str] = []

    def load(self, entry: ManagedModel, module_names: Sequence[str], device: str) -> int:
        sizes, moved = dict(entry.module_sizes), 0
        for n in module_names:
            if self.check is not None:
                self.check()
            time.sleep(self.delay)
            if n not in self.on_device[entry.name]:
                self.on_device[entry.name].add(n)
                self.card.free -= sizes[n]
                moved += sizes[n]
        self.calls.append(("load", entry.name, tuple(module_names), moved))
        return moved

    def unload(self, entry: ManagedModel, module_names: Sequence[str]) -> int:
        sizes, moved = dict(entry.module_sizes), 0
        for n in module_names:
            if n in self.on_device[entry.name]:
                self.on_device[entry.name].discard(n)
                self.card.free += sizes[n]
                moved += sizes[n]
        self.card.free -= self.withhold
        self.withhold = 0
        self.calls.append(("unload", entry.name, tuple(module_names), moved))
        return moved

    def stop_streaming(self, entry: ManagedModel) -> None:
        self.stopped.append(entry.name)


class Weights:
    """A stand-in model object (weak-referenceable) with realistic sizes."""


def manager_on(
    card: Card, mover: FakeMover | None = None, **settings: object
) -> tuple[MemoryManager, FakeMover]:
    mover = mover or FakeMover(card)
    return MemoryManager(lambda: card.free, mover, settings=PlanSettings(**settings)), mover  # type: ignore[arg-type]


def test_manager_evicts_lru_loads_and_reports_real_bytes() -> None:
    card = Card(CARD_4)
    mm, mover = manager_on(card)
    sd15, sdxl = Weights(), Weights()
    mm.register(sd15, "SD1.5 UNet", sizes=blocks(SD15_UNET, 20), dtype="float16")
    mm.register(sdxl, "SDXL UNet", sizes=blocks(SDXL_UNET, 40), dtype="float16")
    first = mm.load_models([sd15])
    assert first.ok and [(e.kind, e.model, e.bytes) for e in first.events] == [
        ("load", "SD1.5 UNet", SD15_UNET)
    ]
    assert first.events[0].details["free_bytes_after"] == CARD_4 - SD15_UNET
    result = mm.load_models([sdxl])
    kinds = [(e.kind, e.model) for e in result.events]
    assert kinds == [("unload", "SD1.5 UNet"), ("partial_load", "SDXL UNet")]
    evict, load = result.events
    assert evict.bytes == SD15_UNET and evict.device_bytes_after == 0
    assert evict.reason == (
        "Evicted SD1.5 UNet (1.60 GiB) to make room for SDXL UNet (4.79 GiB); "
        "it was the only model that could be moved."
    )
    assert load.bytes == 19 * (SDXL_UNET // 40) == load.device_bytes_after == CARD_4 - card.free
    assert mm.events.events()[-2:] == result.events
    (row,) = mm.loaded()
    assert (row.name, row.device_bytes, row.streamed_bytes, row.dtype) == (
        "SDXL UNet",
        load.bytes,
        SDXL_UNET - load.bytes,
        "float16",
    )
    assert mover.calls[1][:2] == ("unload", "SD1.5 UNet")


def test_manager_plans_again_when_the_allocator_frees_less_than_planned() -> None:
    card = Card(CARD_24)
    mm, mover = manager_on(card)
    t5, sd15, sdxl = Weights(), Weights(), Weights()
    mm.register(t5, "T5-XXL", sizes=blocks(T5_XXL, 24))
    mm.register(sd15, "SD1.5 UNet", sizes=blocks(SD15_UNET, 20))
    mm.register(sdxl, "SDXL UNet", sizes=blocks(SDXL_UNET, 40))
    mm.load_models([t5])
    mm.load_models([sd15])
    card.free -= 8 * GIB  # another program
    mover.withhold = 500_000_000  # the allocator keeps this much of the first unload cached
    result = mm.load_models([sdxl])
    block = T5_XXL // 24
    assert [(e.kind, e.model, e.bytes) for e in result.events] == [
        ("partial_unload", "T5-XXL", 3 * block + T5_XXL % 24),  # planned on the probe: 0.97 GB short
        ("partial_unload", "T5-XXL", block),  # planned again: 0.5 GB did not come back
        ("load", "SDXL UNet", SDXL_UNET),
    ]
    assert "partly offloaded" in result.events[1].reason
    first, second = (e.details["free_bytes_after"] for e in result.events[:2])
    assert isinstance(first, int) and isinstance(second, int) and second - first == block


def test_dropped_model_is_cleaned_up_with_an_unload_event() -> None:
    card = Card(CARD_4)
    mm, _ = manager_on(card)
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))

    class Patcher:  # what the app holds: a wrapper around the module, like ModelPatcher
        def __init__(self, model: nn.Module) -> None:
            self.model = model

    entry = mm.register(Patcher(net), "Tiny")
    assert entry.module_sizes == (("0", 288), ("1", 144)) and entry.dtype == "float32"
    assert mm.register(Patcher(net)) is entry  # clones share the module, hence the entry
    mm.load_models([net])
    assert [r.device_bytes for r in mm.loaded()] == [432]
    del net, entry
    gc.collect()
    assert mm.loaded() == []
    last = mm.events.events()[-1]
    assert (last.kind, last.model, last.bytes, last.device_bytes_after) == ("unload", "Tiny", 432, 0)
    assert last.reason == "Tiny was dropped by the app; its 0.4 KiB on the device were released with it."
    other = nn.Linear(2, 2)
    assert mm.register(other, "Tiny").name == "Tiny"  # the name is free again


def test_interrupt_from_another_thread_stops_a_long_load_and_rolls_it_back() -> None:
    card = Card(CARD_24)
    holder: list[MemoryManager] = []
    mover = FakeMover(card, check=lambda: holder[0].check(), delay=0.001)  # checks before every module
    mm, _ = manager_on(card, mover)
    holder.append(mm)
    model = Weights()
    mm.register(model, "SDXL UNet", sizes=blocks(SDXL_UNET, 2000))
    outcome: list[BaseException | None] = []

    def engine() -> None:  # the backend worker thread
        try:
            mm.load_models([model])
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=engine)
    worker.start()
    deadline = time.monotonic() + 5
    while len(mover.on_device["SDXL UNet"]) < 20 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert mm.loaded() == [] and mm.events.events() == ()  # the UI reads without waiting for the move
    mm.interrupt.set()  # the stop button, on the UI thread
    worker.join(10)
    (error,) = outcome
    assert isinstance(error, InterruptedByUser) and error.code == "interrupted"
    assert str(error).startswith("Stopped by the user while moving SDXL UNet.")
    assert not mm.interrupt.is_set() and mover.on_device["SDXL UNet"] == set() and card.free == CARD_24
    assert mm.loaded() == [] and [e.kind for e in mm.events.events()] == ["interrupt"]
    assert mover.calls[-1][0] == "unload" and 20 * (SDXL_UNET // 2000) <= mover.calls[-1][3] < SDXL_UNET
    mover.check, mover.delay = None, 0.0
    assert mm.load_models([model]).events[-1].bytes == SDXL_UNET


def test_partly_unloaded_models_stream_and_an_empty_load_frees_inference_memory() -> None:
    card = Card(CARD_4)
    mm, _ = manager_on(card)
    sd15 = Weights()
    mm.register(sd15, "SD1.5 UNet", sizes=blocks(SD15_UNET, 20))
    mm.load_models([sd15])
    result = mm.load_models([], memory_required=int(2.5 * GIB))  # room for activations only
    (event,) = result.events
    assert event.kind == "partial_unload" and event.model == "SD1.5 UNet"
    assert card.free >= int(2.5 * GIB) + 400 * 1024**2 > card.free - SD15_UNET // 20  # just enough
    (row,) = mm.loaded()
    assert row.device_bytes + row.streamed_bytes == SD15_UNET and row.streamed_bytes == event.bytes


def test_free_memory_unload_all_and_refusals() -> None:
    card = Card(CARD_4)
    mm, mover = manager_on(card)
    sd15, clip = Weights(), Weights()
    mm.register(sd15, "SD1.5 UNet", sizes=blocks(SD15_UNET, 20))
    mm.register(clip, "CLIP-L", sizes=blocks(CLIP_L, 10))
    mm.load_models([clip])
    mm.load_models([sd15])
    result = mm.free_memory(CARD_4, keep=[sd15])
    assert [(e.kind, e.model) for e in result.events] == [("unload", "CLIP-L"), ("refuse", "")]
    assert result.refused == (
        "Could not free 1.83 GiB to leave 4.00 GiB free: only 0.23 GiB could be moved off "
        "the device, 1.60 GiB short; SD1.5 UNet is in use.",
    )
    done = mm.unload_all()
    assert [(e.kind, e.model, e.bytes) for e in done.events] == [("unload", "SD1.5 UNet", SD15_UNET)]
    assert card.free == CARD_4 and mm.loaded() == [] and mover.calls[-1][:2] == ("unload", "SD1.5 UNet")
    huge = mm.load_models([sd15], memory_required=8 * GIB)
    assert not huge.ok and [e.kind for e in huge.events] == ["refuse"]
    with pytest.raises(NotEnoughMemoryError, match=r"Cannot run SD1\.5 UNet") as info:
        huge.raise_if_refused()
    assert info.value.code == "out_of_memory"
