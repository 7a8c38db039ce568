"""Will this model fit? A first estimate from the file's header before anything is loaded.

Pure arithmetic over the entry's component sizes (at the stored dtype or a chosen one) and the
free memory a probe reports, with the policy's reserve and inference headroom kept back on a GPU.
The memory manager will make the real decision; this tells an artist what to expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from core.detect.catalog import memory_profile
from core.files.dtypes import dtype_by_short
from core.memory.inference import activation_bytes, native_workload
from core.units import GIB, mib_or_gib

Verdict = Literal["fits", "partial", "no", "n/a"]


class _Component(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def params(self) -> int: ...
    @property
    def bytes(self) -> int: ...


class Entry(Protocol):
    """What the estimate reads of a library entry (``core.library.Entry``)."""

    @property
    def status(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def family(self) -> str | None: ...
    @property
    def components(self) -> Sequence[_Component]: ...


@dataclass(frozen=True)
class ComponentFit:
    role: str
    family: str
    dtype: str
    bytes: int


@dataclass(frozen=True)
class FitEstimate:
    verdict: Verdict
    components: tuple[ComponentFit, ...]
    total: int
    free: int
    usable: int
    streamed: int  # bytes that would stay in RAM and stream to the device per step
    where: str
    text: str


def _gib(n: int) -> str:
    return mib_or_gib(n, gib_from=GIB // 4, mib_digits=1)


def component_fits(entry: Entry, dtype: str | None = None) -> tuple[ComponentFit, ...]:
    info = dtype_by_short(dtype or "")
    size = info.bits // 8 if info is not None and info.bits >= 8 else None
    chosen = dtype or ""
    return tuple(
        ComponentFit(c.role, c.family, chosen if size else c.dtype, c.params * size if size else c.bytes)
        for c in entry.components
    )


def estimate_fit(
    entry: Entry,
    free: int,
    *,
    where: str,
    on_gpu: bool,
    ram_available: int,
    reserve: int = 0,
    dtype: str | None = None,
    headroom: int | None = None,
    headroom_fixed: bool = False,
) -> FitEstimate:
    """``free``: bytes free on the device (``where`` names it). On a GPU, ``reserve`` (or
    ``headroom``: the memory manager's own floor, which includes the reserve; ``headroom_fixed``:
    the user fixed it, so it stands for the activations) and the activations
    of one image at the family's usual size (the measured model of ``core.memory.inference``, the
    one the manager plans with) are kept back; what does not fit may stream from RAM (partial)."""
    comps = component_fits(entry, dtype)
    total = sum(c.bytes for c in comps)
    if entry.status != "ok" or entry.kind not in ("checkpoint", "diffusion_model", "vae", "text_encoder"):
        why = f"a {entry.kind.replace('_', ' ')} is not loaded alone"
        if entry.status != "ok":
            why = "it is not read yet" if entry.status == "pending" else "the file cannot be read"
        return FitEstimate("n/a", comps, total, free, 0, 0, where, f"No estimate: {why}.")
    if headroom is None:
        headroom = reserve
    # the user fixed the activation headroom: that figure stands for the activations, as the
    # manager takes it (``PlanSettings.headroom_fixed``)
    if on_gpu and entry.kind in ("checkpoint", "diffusion_model") and not headroom_fixed:
        work = native_workload(memory_profile(entry.family), 4 if dtype == "fp32" else 2, "cuda_flash")
        headroom += activation_bytes(memory_profile(entry.family), work)
    usable = max(0, free - headroom)
    if total <= usable:
        text = f"Fits: needs {_gib(total)}, {_gib(usable)} usable in {where}."
        return FitEstimate("fits", comps, total, free, usable, 0, where, text)
    if on_gpu and usable > 0 and total - usable <= ram_available:
        streamed = total - usable
        text = (
            f"Partially: {_gib(usable)} of {_gib(total)} on {where}, {_gib(streamed)} streams from "
            "system RAM each step (slower)."
        )
        return FitEstimate("partial", comps, total, free, usable, streamed, where, text)
    text = f"Does not fit: needs {_gib(total)}, only {_gib(usable)} usable in {where}"
    text += "; it would page from disk and be very slow." if not on_gpu else "."
    return FitEstimate("no", comps, total, free, usable, 0, where, text)
