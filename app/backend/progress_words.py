"""What the status bar says about the worker's tasks: a library scan, a load, a generation."""

from __future__ import annotations

from app.backend.messages import TaskProgress
from core.generate.events import GenerateProgress
from core.library import ScanProgress
from core.loading.assign import LoadProgress
from core.units import in_mib

PHASE_WORDS = {
    "load": "Loading",
    "text_encode": "Encoding the prompt",
    "sample": "Sampling",
    "upscale": "Upscaling",
    "decode": "Decoding",
    "save": "Saving",
}


def scan_progress(p: ScanProgress) -> TaskProgress:
    if p.phase == "listing":
        return TaskProgress("scan", p.done, 0, f"Listing folders: {p.done} files found")
    if p.phase == "inspecting":
        name = f" ({p.current.name})" if p.current is not None else ""
        return TaskProgress("scan", p.done, p.total, f"Reading headers {p.done}/{p.total}{name}")
    return TaskProgress("scan", p.total, p.total, f"Library indexed ({p.cached} from cache)")


def load_progress(p: LoadProgress) -> TaskProgress:
    text = f"Loading {p.component}: {p.tensors_done}/{p.tensors_total} tensors, {in_mib(p.bytes_done, 1)}"
    return TaskProgress("load", p.bytes_done, p.bytes_total, text)


def generate_words(p: GenerateProgress) -> str:
    steps = f" {p.step}/{p.steps}" if p.steps else ""
    return f"{PHASE_WORDS.get(p.phase, p.phase)}{steps}…"  # "…": the status bar clears it when idle
