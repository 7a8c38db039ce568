"""The measured test run: N steps of the main model's diffusion network through the placement,
with what it cost (time per step, peak RSS, peak device memory, resident and streamed bytes)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import psutil
import torch

from core.files.dtypes import short_name
from core.loading.loader import LoadedComponent
from core.memory.inference import Workload, activation_bytes, network_profile
from core.memory.step_placer import StepPlacer
from core.memory.tracking import ActivationTracker
from core.session.placement import Placement
from core.session.snapshots import RunReport
from core.session.testrun import RunConfig, StepDone, perform_test_run


@dataclass
class _RssPeak:
    peak: int = 0
    process: psutil.Process = field(default_factory=psutil.Process)

    def sample(self) -> None:
        self.peak = max(self.peak, int(self.process.memory_info().rss))


def measured_test_run(
    component: LoadedComponent,
    managed: object,
    placement: Placement,
    config: RunConfig,
    progress: Callable[[StepDone], None],
    check: Callable[[], None],
    *,
    measure_activations: bool = False,
) -> RunReport:
    """Run ``component``'s network; with an active placement the manager places ``managed`` (its
    patcher or module) before each step, on its device."""
    rss = _RssPeak()
    rss.sample()
    if placement.active:
        config = replace(config, device=placement.manager.device)
    cuda = config.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(config.device)
    # activations: predicted by the measured model for this workload (room asked of the manager,
    # unless the user fixed the inference headroom), and measured by the tracker when asked
    attention = "cuda_flash" if cuda else "cpu_flash"
    work = Workload(config.width, config.height, config.batch, config.dtype.itemsize, attention)
    profile, width = network_profile(component.family, component.module)
    predicted = activation_bytes(profile, work, width)
    fixed = 0 if placement.manager.settings.headroom_fixed else None  # the user's figure stands
    place = (
        StepPlacer(placement.manager, placement.mover, managed, (profile, width), work, memory_required=fixed)
        if placement.active
        else None
    )
    tracker = ActivationTracker()

    def step(done: StepDone) -> None:
        rss.sample()
        progress(done)

    t0 = time.perf_counter()
    try:
        with tracker if measure_activations else contextlib.nullcontext():
            result = perform_test_run(component.module, config, check=check, progress=step, before_step=place)
    finally:
        placement.settle()  # the next run's first layer, fetched ahead, is not kept (nor on a stop)
    total = time.perf_counter() - t0
    resident, streamed = place.finish() if place is not None else (0, 0)
    peak_vram = int(torch.cuda.max_memory_allocated(config.device)) if cuda else None
    if place is not None and not cuda:
        peak_vram = place.peak_placed  # a simulated card: what the manager placed on it
    return RunReport(
        steps=config.steps, width=config.width, height=config.height, batch=config.batch,
        seconds_per_step=result.seconds_per_step, total_seconds=total, device=config.device,
        dtype=short_name(config.dtype), peak_rss=rss.peak, peak_vram=peak_vram,
        output=result.output_summary(),
        resident_bytes=resident, streamed_bytes_per_step=streamed,
        placement=placement.describe().label if placement.active else "", inference_bytes_predicted=predicted,
        inference_bytes_measured=tracker.peak_bytes if measure_activations else None,
    )  # fmt: skip
