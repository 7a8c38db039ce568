"""The measured test run: N steps of the main model's diffusion network through the placement,
with what it cost (time per step, peak RSS, peak device memory, resident and streamed bytes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import psutil
import torch

from core.files.dtypes import short_name
from core.loading.loader import LoadedComponent
from core.run.placed import StepPlacer
from core.run.testrun import RunConfig, StepDone, perform_test_run
from core.session.placement import Placement
from core.session.snapshots import RunReport


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
    place = StepPlacer(placement.manager, placement.mover, managed) if placement.active else None

    def step(done: StepDone) -> None:
        rss.sample()
        progress(done)

    t0 = time.perf_counter()
    result = perform_test_run(component.module, config, check=check, progress=step, before_step=place)
    total = time.perf_counter() - t0
    resident, streamed = place.finish() if place is not None else (0, 0)
    peak_vram = int(torch.cuda.max_memory_allocated(config.device)) if cuda else None
    if place is not None and not cuda:
        peak_vram = place.peak_placed  # a simulated card: what the manager placed on it
    return RunReport(
        config.steps, config.width, config.height, config.batch, result.seconds_per_step, total,
        config.device, short_name(config.dtype), rss.peak, peak_vram, result.output_summary(),
        resident, streamed, placement.describe().label if placement.active else "",
    )  # fmt: skip
