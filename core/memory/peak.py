"""The most memory a piece of work took: the device allocator's peak on CUDA, the process's peak
resident set elsewhere (``getrusage``: kilobytes on Linux, bytes on macOS)."""

from __future__ import annotations

import resource
import sys

import torch


def reset_peak(device: torch.device | str) -> None:
    """Start a new peak on a CUDA device (nothing to do on the CPU: its peak is the process's)."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device | str) -> int:
    if torch.device(device).type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def median_step_seconds(step_seconds: list[float]) -> float:
    """The typical time of one step: the median of the steps after the first (which warms caches
    and allocators), or of all when there is only one; 0 with none."""
    times = sorted(step_seconds[1:] or step_seconds)
    return times[len(times) // 2] if times else 0.0
