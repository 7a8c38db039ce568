"""How much memory a denoising step needs for activations: a measured model, kept as data.

A step's activation peak (weights and inputs excluded) is, per network family,

    peak = bytes(dtype) * batch * (per_position * N + per_score * heads * T**2 + constant)

* ``N``: latent positions the network works on (``H/8 * W/8`` for a UNet, the ``H/16 * W/16``
  image tokens of Flux). Every activation of a convolution or a transformer block is a multiple of
  N times a channel width, and a UNet keeps its skip connections until the decoder uses them, so
  the peak is one multiple of N per family (the largest level's working set plus the skips).
* ``T``: the tokens of the largest self-attention (N for SD1.5, whose first level attends; N/4
  for SDXL, whose first attention level is the second; image plus 512 text tokens for Flux).
  Only attention that materialises the (T x T) score matrix per head ("math", the fallback kernel)
  pays ``per_score``; flash and memory-efficient kernels (CPU flash in PyTorch's SDPA, CUDA
  flash/efficient) are linear in T and have ``per_score = 0``.
* ``constant``: what does not grow with the image (the text tokens' stream in Flux, embeddings).

Each architecture package gives its networks' models (``core/archs/<arch>/net.py``: a
:class:`~core.archs.memory.Profile` and its :class:`~core.archs.memory.Coefficients`).
The coefficients in :data:`COEFFICIENTS` are least-squares fits to measurements by
``bench/inference_memory.py`` (``core.memory.tracking.ActivationTracker``: peak bytes of live
activation tensors during one forward), see docs/benchmarks.md for the runs and their errors.
Every function here is pure: planning, the run report and the window's fit estimate all call them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from torch import nn

from core.archs.catalog import NETS
from core.archs.memory import Coefficients, MemoryModel, Profile
from core.detect.catalog import memory_profile
from core.units import mib_or_gib

AttentionKind = Literal["cpu_flash", "cuda_flash", "math"]
ATTENTION_KINDS: tuple[AttentionKind, ...] = ("cpu_flash", "cuda_flash", "math")


@dataclass(frozen=True)
class Workload:
    """One denoising step's shape: image size in pixels, batch, bytes per element, attention kind."""

    width: int
    height: int
    batch: int = 1
    dtype_bytes: int = 2
    attention: str = "cuda_flash"

    def __post_init__(self) -> None:
        if min(self.width, self.height, self.batch, self.dtype_bytes) < 1:
            raise ValueError(f"a workload needs positive sizes, batch and dtype bytes: {self}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {self.attention!r}: one of {ATTENTION_KINDS}")


def _collect() -> dict[str, MemoryModel]:
    """Every architecture package's memory models by profile name (a family record names one); two
    networks may share one (Chroma uses Flux's), never give two under one name."""
    found: dict[str, MemoryModel] = {}
    for net in NETS:
        for name, model in net.memory.items():
            if found.setdefault(name, model) != model:
                raise ValueError(f"the memory profile {name!r} is given twice, differently")
    return found


_MODELS = _collect()
PROFILES: MappingProxyType[str, Profile] = MappingProxyType({n: m.profile for n, m in _MODELS.items()})
COEFFICIENTS: MappingProxyType[tuple[str, str], Coefficients] = MappingProxyType(
    {(n, kind): c for n, m in _MODELS.items() for kind, c in m.coefficients.items()}
)


def has_coefficients(profile: str, attention: str) -> bool:
    return (profile, attention) in COEFFICIENTS


def coefficients(profile: str, attention: str) -> Coefficients:
    try:
        return COEFFICIENTS[(profile, attention)]
    except KeyError:
        raise KeyError(f"no measured inference-memory model for {profile!r} with {attention!r}") from None


def predict(profile: str, work: Workload, width: int | None = None) -> int:
    """Predicted peak activation bytes of one step of ``work`` on a ``profile`` network.

    ``width``: the network's channel width when it is not the family's (a test's tiny config):
    every activation is a multiple of it, so the prediction scales with it (an approximation)."""
    prof, c = PROFILES[profile], coefficients(profile, work.attention)
    n = prof.positions(work.width, work.height)
    t = prof.attention_tokens(work.width, work.height)
    per_sample = c.per_sample(n) + c.per_score * prof.heads * t * t
    scale = 1.0 if width is None else width / prof.width
    return int(work.dtype_bytes * work.batch * per_sample * scale)


def network_profile(family: str | None, model: object) -> tuple[str | None, int | None]:
    """The inference-memory profile of a loaded diffusion network (its family record's) and its
    channel width (for scaling a test's tiny config); (None, None) without a measured profile.
    ``model`` may be the network or what holds it (a patcher's ``model``)."""
    profile = memory_profile(family)
    if profile is None:
        return None, None
    module = getattr(model, "model", model)
    config = getattr(module, "config", None)
    net = next((n for n in NETS if isinstance(module, nn.Module) and n.owns(module)), None)
    return profile, net.width(config) if net is not None and config is not None else None


def _per_pixel(name: str) -> float:
    """Bytes per element-byte per pixel of a profile's measured CPU model (its N term)."""
    return COEFFICIENTS[(name, "cpu_flash")].per_position / PROFILES[name].latent_stride ** 2


#: The profile assumed for a family without a measured model: the largest activations measured
#: per pixel (an upper bound rather than a guess low enough to run out of memory; FLUX.2 dev's today,
#: twice FLUX.1's).
FALLBACK_PROFILE = max((n for n in PROFILES if (n, "cpu_flash") in COEFFICIENTS), key=_per_pixel)


def activation_bytes(profile: str | None, work: Workload, width: int | None = None) -> int:
    """:func:`predict` for ``profile``, or for :data:`FALLBACK_PROFILE` when it is unknown."""
    if profile is None or profile not in PROFILES:
        return predict(FALLBACK_PROFILE, work)
    return predict(profile, work, width)


def native_workload(profile: str | None, dtype_bytes: int, attention: str) -> Workload:
    """One image at the family's usual size: the estimate used before a size is chosen."""
    size = PROFILES[profile if profile is not None and profile in PROFILES else FALLBACK_PROFILE].native
    return Workload(size, size, 1, dtype_bytes, attention)


def largest_fitting(
    profile: str | None, work: Workload, budget: int, width: int | None = None, step: int = 64
) -> Workload | None:
    """The workload closest to ``work`` whose activations fit in ``budget`` bytes: the largest
    smaller batch at the same size, else at batch 1 the largest size with the same aspect shrunk
    in ``step``-pixel strides (each side at least ``step``). None when not even that fits."""
    for b in range(work.batch - 1, 0, -1):
        smaller = Workload(work.width, work.height, b, work.dtype_bytes, work.attention)
        if activation_bytes(profile, smaller, width) <= budget:
            return smaller
    longest = max(work.width, work.height)
    for side in range(longest - longest % step, 0, -step):
        w = max(step, work.width * side // longest // step * step)
        h = max(step, work.height * side // longest // step * step)
        if (w, h) == (work.width, work.height):
            continue
        candidate = Workload(w, h, 1, work.dtype_bytes, work.attention)
        if activation_bytes(profile, candidate, width) <= budget:
            return candidate
    return None


def fit_advice(profile: str | None, work: Workload, budget: int, width: int | None = None) -> str:
    """A sentence naming what would fit in ``budget`` bytes of activations (for a refusal)."""
    need = activation_bytes(profile, work, width)
    fits = largest_fitting(profile, work, budget, width)
    what = f"{work.width}x{work.height} at batch {work.batch} needs {mib_or_gib(need)} of activations"
    if budget <= 0:
        return f"{what}, and the streamed weights alone leave no room for any: use a larger card."
    if fits is None:
        return f"{what} but only {mib_or_gib(budget)} is left: not even 64x64 at batch 1 fits."
    if fits.batch > 1 or (fits.width, fits.height) == (work.width, work.height):
        return f"{what} but only {mib_or_gib(budget)} is left: a batch of {fits.batch} fits at this size."
    return f"{what} but only {mib_or_gib(budget)} is left: {fits.width}x{fits.height} at batch 1 fits."
