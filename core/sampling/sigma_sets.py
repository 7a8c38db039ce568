"""Published sigma sets: Align Your Steps (Sabour et al. 2024, NVIDIA) and GITS (Chen et al. 2024,
arXiv 2405.11326), as ComfyUI's ``AlignYourStepsScheduler`` and ``GITSScheduler`` nodes compute
them.

Each set is a short list of noise levels optimised for one model kind; another step count is
reached by log-linear interpolation (``log sigma`` interpolated linearly over an even grid from
the lowest level to the highest). The nodes' denoise: ``round(steps * denoise)`` steps are kept
from the tail of the ``steps``-step set, and the last sigma is set to 0.

The AYS sets are for SD1-style and SDXL-style eps models (sigmas 14.61 .. 0.029) and for SVD
(700 .. 0.002); the GITS sets (coefficients 0.80 .. 1.50, 2 .. 20 steps, interpolated from the
20-step set above that) for SD1-style models. As KSampler schedulers (``ays_sd1``, ``ays_sdxl``,
``gits`` at its default coefficient 1.20) they take KSampler's denoise rule like every other
scheduler, and they refuse models whose noise table does not reach 14.61 (flow models, PixArt):
their pictures would be noise.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Literal

import numpy
import torch
from torch import Tensor

from core.errors import LoadoutError
from core.sampling.model_sampling import ModelSampling

AysKind = Literal["SD1", "SDXL", "SVD"]

#: Align Your Steps' published 10-step noise levels (NVIDIA's how-to page), highest first.
AYS_LEVELS: dict[str, tuple[float, ...]] = {
    "SD1": (14.6146412293, 6.4745760956, 3.8636745985, 2.6946151520, 1.8841921177, 1.3943805092,
            0.9642583904, 0.6523686016, 0.3977456272, 0.1515232662, 0.0291671582),
    "SDXL": (14.6146412293, 6.3184485287, 3.7681790315, 2.1811480769, 1.3405244945, 0.8620721141,
             0.5550693289, 0.3798540708, 0.2332364134, 0.1114188177, 0.0291671582),
    "SVD": (700.00, 54.5, 15.886, 7.977, 4.248, 1.789, 0.981, 0.403, 0.173, 0.034, 0.002),
}  # fmt: skip

GITS_DEFAULT_COEFF = 1.20


def loglinear_interp(levels: tuple[float, ...] | list[float], count: int) -> list[float]:
    """``count`` levels between the same ends, ``log sigma`` linear in an even grid."""
    xs = numpy.linspace(0, 1, len(levels))
    ys = numpy.log(numpy.asarray(levels, dtype=numpy.float64)[::-1])
    new = numpy.interp(numpy.linspace(0, 1, count), xs, ys)
    return [float(v) for v in numpy.exp(new)[::-1]]


def _tail(levels: list[float], steps: int, denoise: float) -> Tensor:
    total = steps if denoise >= 1.0 else round(steps * denoise)
    if denoise <= 0.0:
        return torch.zeros(0, dtype=torch.float32)
    kept = levels[-(total + 1) :]
    kept[-1] = 0.0
    return torch.tensor(kept, dtype=torch.float32)


def align_your_steps(kind: AysKind, steps: int, denoise: float = 1.0) -> Tensor:
    """The AlignYourStepsScheduler node's sigmas (float32, ending with 0)."""
    levels = list(AYS_LEVELS[kind])
    if steps + 1 != len(levels):
        levels = loglinear_interp(levels, steps + 1)
    return _tail(levels, steps, denoise)


@cache
def _gits_levels() -> dict[str, list[list[float]]]:
    data = json.loads((Path(__file__).with_name("gits_sigmas.json")).read_text())
    levels: dict[str, list[list[float]]] = data["levels"]
    return levels


def gits(coeff: float, steps: int, denoise: float = 1.0) -> Tensor:
    """The GITSScheduler node's sigmas (float32, ending with 0)."""
    table = _gits_levels().get(f"{round(coeff, 2):.2f}")
    if table is None or steps < 2:
        raise LoadoutError(
            f"GITS has no sigma set for coefficient {coeff} and {steps} steps",
            why="GITS' sets are for coefficients 0.80 to 1.50 in steps of 0.05, and 2 steps or more",
            fix="pick such a coefficient (1.20 is the default) and at least 2 steps",
            code="bad_argument",
        )
    levels = list(table[steps - 2]) if steps <= 20 else loglinear_interp(table[-1], steps + 1)
    return _tail(levels, steps, denoise)


def _check_table(ms: ModelSampling, name: str) -> None:
    top = float(ms.sigma_max)
    if not math.isclose(top, AYS_LEVELS["SD1"][0], rel_tol=1e-4):
        raise LoadoutError(
            f"the {name} scheduler does not fit this model",
            why=f"its sigmas are for SD1/SD2/SDXL-style noise up to 14.61; this model's reach {top:.4g}",
            fix="pick another scheduler (normal, simple, karras, beta ...)",
            code="bad_argument",
        )


def ays_sd1(ms: ModelSampling, steps: int) -> Tensor:
    _check_table(ms, "ays_sd1")
    return align_your_steps("SD1", steps)


def ays_sdxl(ms: ModelSampling, steps: int) -> Tensor:
    _check_table(ms, "ays_sdxl")
    return align_your_steps("SDXL", steps)


def gits_scheduler(ms: ModelSampling, steps: int) -> Tensor:
    _check_table(ms, "gits")
    return gits(GITS_DEFAULT_COEFF, steps)
