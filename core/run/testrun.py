"""The test run: N denoising forward passes of a loaded diffusion model on deterministic inputs
of the family's real shapes, to learn what a model costs (seconds per step, memory) before a long
job. ``loadout run`` and the app's "Test run" both call :func:`perform_test_run`.

Inputs are drawn from one seed on the CPU and moved to the device, so a run is bit-identical
whatever the device placement. The loop is a plain Euler integration over sigmas from 1 to 0
(``x += (sigma_next - sigma) * model(x, sigma)``); it is a workload, not a sampler.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.errors import LoadoutError
from core.models.flux import make_img_ids, make_txt_ids, pack_latents, unpack_latents
from core.models.kinds import network_kind

#: Text tokens per family (what the real text encoders produce).
CONTEXT_TOKENS = {"unet": 77, "mmdit": 154, "flux": 512, "chroma": 512}


@dataclass(frozen=True)
class RunConfig:
    steps: int = 4
    width: int = 512
    height: int = 512
    batch: int = 1
    seed: int = 0
    dtype: torch.dtype = torch.float32
    device: str = "cpu"

    def __post_init__(self) -> None:
        problems = []
        if self.steps < 1:
            problems.append(f"steps must be at least 1, not {self.steps}")
        if self.batch < 1:
            problems.append(f"batch must be at least 1, not {self.batch}")
        if self.width < 64 or self.height < 64 or self.width % 8 or self.height % 8:
            problems.append(f"size {self.width}x{self.height} must be multiples of 8, at least 64")
        if problems:
            raise LoadoutError("invalid test run settings", why="; ".join(problems), code="bad_argument")


@dataclass(frozen=True)
class StepDone:
    step: int
    steps: int
    seconds: float


@dataclass
class RunResult:
    output: torch.Tensor  # the final latent, on the CPU
    step_seconds: list[float] = field(default_factory=list)

    @property
    def seconds_per_step(self) -> float:
        # the first step warms caches and allocators: report the median of the others when possible
        times = sorted(self.step_seconds[1:] or self.step_seconds)
        return times[len(times) // 2]

    def output_summary(self) -> dict[str, object]:
        t = self.output.detach().to("cpu").contiguous()
        digest = hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        return {
            "shape": list(t.shape),
            "sum": float(t.double().sum()),
            "abs_sum": float(t.double().abs().sum()),
            "sha256": digest,
        }


def _kind(model: nn.Module) -> str:
    return network_kind(model, action="drive a test run with")


class _Inputs:
    """Everything but the evolving latent, drawn once from the seed."""

    def __init__(self, model: nn.Module, cfg: RunConfig) -> None:
        self.kind = _kind(model)
        g = torch.Generator().manual_seed(cfg.seed)
        b, h, w = cfg.batch, cfg.height // 8, cfg.width // 8
        c: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        if self.kind == "unet":
            self.state_channels, in_channels = c.out_channels, c.in_channels
            self.context = torch.randn(b, 77, c.context_dim, generator=g) if c.context_dim else None
            self.y = torch.randn(b, c.adm_in_channels, generator=g) if c.adm_in_channels else None
        elif self.kind == "mmdit":
            self.state_channels, in_channels = c.out_channels, c.in_channels
            self.context = torch.randn(b, 154, c.context_dim, generator=g) if c.context_dim else None
            self.y = torch.randn(b, c.adm_in_channels, generator=g) if c.adm_in_channels else None
        else:
            self.state_channels, in_channels = c.out_channels // 4, c.in_channels // 4
            self.context = torch.randn(b, 512, c.context_in_dim, generator=g)
            self.y = torch.randn(b, c.vec_in_dim, generator=g) if self.kind == "flux" else None
            self.guidance = torch.full((b,), 3.5)
            self.img_ids = make_img_ids(b, h, w)
            self.txt_ids = make_txt_ids(b, 512)
        self.noise = torch.randn(b, self.state_channels, h, w, generator=g)
        extra = in_channels - self.state_channels  # inpaint / fill / ip2p conditioning channels
        self.extra = torch.randn(b, extra, h, w, generator=g) if extra > 0 else None
        self.height, self.width = h, w

    def to(self, device: str, dtype: torch.dtype) -> None:
        for name, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(
                    self, name, value.to(device=device, dtype=dtype if value.is_floating_point() else None)
                )

    def forward(self, model: nn.Module, x: torch.Tensor, sigma: float) -> torch.Tensor:
        b = x.shape[0]
        inp = x if self.extra is None else torch.cat([x, self.extra], dim=1)
        if self.kind == "unet":
            t = torch.full((b,), sigma * 999.0, device=x.device, dtype=x.dtype)
            out: torch.Tensor = model(inp, t, self.context, self.y)
            return out
        if self.kind == "mmdit":
            t = torch.full((b,), sigma * 1000.0, device=x.device, dtype=x.dtype)
            out = model(inp, t, self.context, self.y)
            return out
        t = torch.full((b,), sigma, device=x.device, dtype=x.dtype)
        tokens = pack_latents(inp)
        config: Any = getattr(model, "config")  # noqa: B009
        guidance = self.guidance if getattr(config, "guidance_embed", True) else None
        if self.kind == "flux":
            out = model(tokens, self.img_ids, self.context, self.txt_ids, t, self.y, guidance)
        else:
            out = model(tokens, self.img_ids, self.context, self.txt_ids, t, guidance)
        return unpack_latents(out, self.height, self.width)


def perform_test_run(
    model: nn.Module,
    cfg: RunConfig,
    *,
    check: Callable[[], None] | None = None,
    progress: Callable[[StepDone], None] | None = None,
    before_step: Callable[[], None] | None = None,
) -> RunResult:
    """Run ``cfg.steps`` forward passes. ``check`` runs before every step (interrupt);
    ``before_step`` lets the memory manager place the model first."""
    inputs = _Inputs(model, cfg)
    inputs.to(cfg.device, cfg.dtype)
    x = inputs.noise.clone()
    sigmas = torch.linspace(1.0, 0.0, cfg.steps + 1).tolist()
    result = RunResult(output=x)
    with torch.inference_mode():
        for i in range(cfg.steps):
            if check is not None:
                check()
            if before_step is not None:
                before_step()
            t0 = time.perf_counter()
            out = inputs.forward(model, x, sigmas[i])
            x = x + (sigmas[i + 1] - sigmas[i]) * out
            if x.device.type == "cuda":
                torch.cuda.synchronize(x.device)
            result.step_seconds.append(time.perf_counter() - t0)
            if progress is not None:
                progress(StepDone(i + 1, cfg.steps, result.step_seconds[-1]))
    result.output = x.to("cpu")
    return result
