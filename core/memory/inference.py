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

The coefficients in :data:`COEFFICIENTS` are least-squares fits to measurements by
``bench/inference_memory.py`` (``core.memory.tracking.ActivationTracker``: peak bytes of live
activation tensors during one forward), see docs/benchmarks.md for the runs and their errors.
Every function here is pure: planning, the run report and the window's fit estimate all call them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Literal

from core.archs.nextdit.net import MEMORY as NEXTDIT_MEMORY
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


@dataclass(frozen=True)
class Profile:
    """How a network family turns a workload into N and T (see the module docstring)."""

    name: str
    latent_stride: int  # pixels per position N (8: the VAE; 16: VAE and 2x2 patches)
    attention_stride: int  # pixels per token of the largest self-attention
    text_tokens: int  # tokens attended together with the image (joint attention), else 0
    heads: int  # heads of the largest self-attention
    native: int  # the family's usual square size, for estimates without a workload
    width: int  # the channel width the coefficients were measured at (UNet model_channels, hidden)

    def positions(self, width: int, height: int) -> int:
        return (width // self.latent_stride) * (height // self.latent_stride)

    def attention_tokens(self, width: int, height: int) -> int:
        return (width // self.attention_stride) * (height // self.attention_stride) + self.text_tokens


@dataclass(frozen=True)
class Coefficients:
    per_position: float  # bytes per element-byte per position
    constant: float
    per_score: float = 0.0
    measured: str = ""  # how and where, or "unmeasured: ..." when taken from a sibling kind
    #: (per_position, constant) of a second place the peak can be, for a network whose peak moves
    #: with the image size (PixArt's cross-attention below ~150 px); the larger of the two counts
    other_peak: tuple[float, float] | None = None

    def per_sample(self, positions: int) -> float:
        """The linear part (no score term): bytes per element-byte of one sample."""
        main = self.per_position * positions + self.constant
        if self.other_peak is None:
            return main
        return max(main, self.other_peak[0] * positions + self.other_peak[1])


#: memory models an architecture package keeps (core.archs), read into this module's records
_PACKAGE_MODELS = NEXTDIT_MEMORY

PROFILES = MappingProxyType(
    {
        "sd1": Profile("SD1.x UNet", 8, 8, 0, 8, 512, 320),
        "sdxl": Profile("SDXL UNet", 8, 16, 0, 10, 1024, 320),
        "flux": Profile("Flux transformer", 16, 16, 512, 24, 1024, 3072),
        # PixArt attends to its T5 tokens in a separate cross-attention: no joint text tokens
        "pixart": Profile("PixArt transformer", 16, 16, 0, 16, 1024, 1152),
    }
    | {name: Profile(**asdict(m.profile)) for name, m in _PACKAGE_MODELS.items()}
)

_CPU = "ActivationTracker, torch 2.13 CPU, fp32, batch 1, one forward at {}"
_FROM_CPU = "unmeasured here (no GPU): the CPU flash fit; CUDA flash/efficient keep the same tensors"

_PIXART_D, _PIXART_L = 1152, 300  # every released PixArt's width; the T5 tokens it is trained at


#: (profile, attention kind) -> coefficients fitted by ``bench/inference_memory.py --fit``.
_TABLE = {
    ("sd1", "cpu_flash"): Coefficients(8000.0, 1281.0, measured=_CPU.format("128/192/256 px")),
    ("sdxl", "cpu_flash"): Coefficients(4880.0, 1281.0, measured=_CPU.format("128/192/256 px")),
    # Flux: 64,700 per token of the joint sequence, image (N) and text (512) alike: c = 64,700 * 512
    ("flux", "cpu_flash"): Coefficients(64700.0, 33_126_400.0, measured=_CPU.format("64/128 px")),
    # PixArt: derived from its shapes (D wide, L T5 tokens, N image tokens) and measured exactly by
    # the tracker at 64..1024 px (docs/benchmarks.md). The peak is in the MLP: 11 D per token (fc1's
    # and the GELU's 4 D each, the MLP's input, the block's input and its residual) plus the
    # projected caption (L D), the timestep's t, t6 and a block's six modulations (13 D) and the
    # scalar timestep (counted as a 14th row); below ~150 px it is the cross-attention's: 4 D per
    # token plus the caption, its keys and values (3 L D) and the same 14 rows.
    ("pixart", "cpu_flash"): Coefficients(
        11 * _PIXART_D,
        (_PIXART_L + 14) * _PIXART_D,
        measured=_CPU.format("64..1024 px"),
        other_peak=(4 * _PIXART_D, (3 * _PIXART_L + 14) * _PIXART_D),
    ),
}
_TABLE |= {(p, "cuda_flash"): replace(c, measured=_FROM_CPU) for (p, _), c in list(_TABLE.items())}
_TABLE |= {
    (name, kind): Coefficients(**asdict(c))
    for name, m in _PACKAGE_MODELS.items()
    for kind, c in m.coefficients.items()
}
COEFFICIENTS: MappingProxyType[tuple[str, str], Coefficients] = MappingProxyType(_TABLE)


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
    config = getattr(getattr(model, "model", model), "config", None)
    width = getattr(config, "model_channels", None) or getattr(config, "hidden_size", None)
    return profile, width if isinstance(width, int) else None


#: The profile assumed for a family without a measured model: the largest activations measured
#: per pixel (an upper bound rather than a guess low enough to run out of memory).
FALLBACK_PROFILE = "flux"


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
    return (
        f"{what} but only {mib_or_gib(budget)} is left: {fits.width}x{fits.height} at batch 1 fits "
        f"(--size {fits.width}x{fits.height} --batch 1)."
    )
