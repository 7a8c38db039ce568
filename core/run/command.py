"""``loadout run``: load a model and its LoRAs, place it through the memory manager, run the test
run, and report what it cost. The app's "Test run" uses the same pieces.

With ``vram_limit`` the manager sees a card of that size (on the CPU too: it then really streams
the layers that do not fit, so the lowvram path runs). The output is bit-identical whatever the
limit and whether LoRAs are baked (resident layers) or applied at cast time (streamed layers).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from core.loading.assign import interrupt_check
from core.memory.events import MemoryEvent
from core.memory.peak import peak_bytes
from core.memory.policy import MemorySettings
from core.patching.merge import LoraArg
from core.session.compose import headless_session, load_main
from core.session.dtype_choice import compute_override
from core.session.session import family_naming
from core.session.slots import SlotId
from core.session.testrun import RunConfig, StepDone


@dataclass(frozen=True)
class RunRequest:
    model: Path
    loras: tuple[LoraArg, ...] = ()
    config: RunConfig = field(default_factory=RunConfig)
    device: str = "cpu"
    vram_limit: int | None = None
    settings: MemorySettings = field(default_factory=MemorySettings)
    measure_activations: bool = True  # count live activation tensors (costs Python time per op)


@dataclass(frozen=True)
class LoraSummary:
    path: Path
    matched: int
    unmatched: int


@dataclass(frozen=True, kw_only=True)
class HeadlessReport:
    """What ``loadout run`` measured. :meth:`to_json` is the one place its JSON is written."""

    model: Path
    family: str | None
    device: str  # the device's label
    dtype: str  # torch's name: "float32"
    steps: int
    seconds_per_step: float
    resident_bytes: int
    streamed_bytes_per_step: int
    peak_bytes: int
    inference_bytes_predicted: int
    inference_bytes_measured: int | None
    vram_state: str
    vram_reason: str
    events: tuple[MemoryEvent, ...]
    output: dict[str, object]
    loras: tuple[LoraSummary, ...]
    pid: int

    def to_json(self) -> dict[str, Any]:
        """The ``loadout run --json`` report (its fields and their order are a contract)."""
        return {
            "model": str(self.model),
            "family": self.family,
            "device": self.device,
            "dtype": self.dtype,
            "steps": self.steps,
            "seconds_per_step": round(self.seconds_per_step, 4),
            "resident_bytes": self.resident_bytes,
            "streamed_bytes_per_step": self.streamed_bytes_per_step,
            "peak_bytes": self.peak_bytes,
            "inference_bytes_predicted": self.inference_bytes_predicted,
            "inference_bytes_measured": self.inference_bytes_measured,
            "vram_state": self.vram_state,
            "vram_reason": self.vram_reason,
            "events": [e.to_json() for e in self.events],
            "output": self.output,
            "loras": [
                {"path": str(x.path), "matched": x.matched, "unmatched": x.unmatched} for x in self.loras
            ],
            "pid": self.pid,
        }


def run_headless(
    request: RunRequest,
    *,
    interrupt: threading.Event | None = None,
    progress: Callable[[StepDone], None] | None = None,
) -> HeadlessReport:
    """Load, add the LoRAs (recorded, never baked: the mover applies them), and time the test run
    through a :class:`Session` placing on the requested device. Setting ``interrupt`` (from any
    thread, e.g. a Ctrl-C handler) stops the load or the run within one tensor or layer."""
    settings, dtype = compute_override(request.config.dtype, request.settings)  # fp8: fp8 matmul
    session, device = headless_session(
        request.device, settings=settings, vram_limit=request.vram_limit, interrupt=interrupt,
        naming=family_naming,
    )  # fmt: skip
    placement = session.placement
    det = load_main(session, request.model, interrupt_check(placement.interrupt.is_set))
    for arg in request.loras:
        session.loras.add(arg.path, arg.model, arg.clip, block_weights=arg.block_weights)
    cfg = request.config
    if dtype is None:  # the inputs and activations run in the load's 16-bit choice, never fp8
        chosen = session.model(SlotId.MAIN).dtype_choice
        cfg = replace(cfg, dtype=chosen.activation_dtype if chosen is not None else torch.float32)
    report = session.test_run(
        cfg,
        progress or (lambda s: None),
        placement.manager.check,
        measure_activations=request.measure_activations,
    )
    decision = placement.decision
    assert decision is not None  # a placement on a named device always has one
    # On the CPU without a simulated card, RAM is the device: the model is "loaded" (zero-copy for
    # unpatched weights, LoRAs applied on the way) like on a card large enough for it.
    cpu_only = report.device == "cpu" and request.vram_limit is None
    stack = session.loras.stack
    return HeadlessReport(
        model=request.model, family=det.family, device=device.label,
        dtype=str(cfg.dtype).removeprefix("torch."), steps=cfg.steps,
        seconds_per_step=report.seconds_per_step,
        resident_bytes=report.resident_bytes, streamed_bytes_per_step=report.streamed_bytes_per_step,
        peak_bytes=peak_bytes(report.device), inference_bytes_predicted=report.inference_bytes_predicted,
        inference_bytes_measured=report.inference_bytes_measured,
        vram_state="normal" if cpu_only else decision.state.name.lower(), vram_reason=decision.reason,
        events=tuple(placement.events.events()), output=report.output,
        loras=tuple(LoraSummary(e.path, len(e.report.matched), len(e.report.unmatched))
                    for e in (stack.entries.values() if stack is not None else ())),
        pid=os.getpid(),
    )  # fmt: skip


def run_model(
    request: RunRequest,
    *,
    interrupt: threading.Event | None = None,
    progress: Callable[[StepDone], None] | None = None,
) -> dict[str, Any]:
    """Everything ``loadout run --json`` prints."""
    return run_headless(request, interrupt=interrupt, progress=progress).to_json()
