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

from core.archs.catalog import net_of
from core.errors import LoadoutError
from core.memory.peak import median_step_seconds
from core.sampling.conditioning import Conditioning
from core.sampling.network import NetworkAdapter


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
        return median_step_seconds(self.step_seconds)

    def output_summary(self) -> dict[str, object]:
        t = self.output.detach().to("cpu").contiguous()
        digest = hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        return {
            "shape": list(t.shape),
            "sum": float(t.double().sum()),
            "abs_sum": float(t.double().abs().sum()),
            "sha256": digest,
        }


class _Inputs:
    """Everything but the evolving latent, drawn once from the seed (the network's package draws its
    own stand-ins first, then the noise and any extra input channels are drawn); each step calls the
    network through the :class:`~core.sampling.network.NetworkAdapter`."""

    def __init__(self, model: nn.Module, cfg: RunConfig) -> None:
        self.net = net_of(model, action="drive a test run with")
        self.kind = self.net.id
        self.convention = self.net.calling
        g = torch.Generator().manual_seed(cfg.seed)
        f = self.convention.latent_stride
        b, h, w = cfg.batch, cfg.height // f, cfg.width // f
        c: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        stand_in = self.net.stand_in(c, b, g)
        self.state_channels = stand_in.state_channels
        self.context, self.y = stand_in.context, stand_in.pooled
        self.guidance, self.mask = stand_in.guidance, stand_in.mask
        self.noise = torch.randn(b, self.state_channels, h, w, generator=g)
        extra = stand_in.in_channels - self.state_channels  # inpaint / fill / ip2p conditioning channels
        self.extra = torch.randn(b, extra, h, w, generator=g) if extra > 0 else None

    def to(self, device: str, dtype: torch.dtype) -> None:
        for name, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(
                    self, name, value.to(device=device, dtype=dtype if value.is_floating_point() else None)
                )

    def adapter(self, model: nn.Module) -> NetworkAdapter:
        return NetworkAdapter(model, concat=self.extra, convention=self.kind)

    def conditioning(self, x: torch.Tensor) -> Conditioning:
        # a UNet without cross-attention never reads its context: an empty one stands in
        context = self.context if self.context is not None else x.new_zeros(x.shape[0], 0, 1)
        return Conditioning(context, self.y, self.guidance, self.mask)

    def timestep(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        t = sigma * self.convention.unit_timestep
        return torch.full((x.shape[0],), t, device=x.device, dtype=x.dtype)

    def forward(self, model: nn.Module, x: torch.Tensor, sigma: float) -> torch.Tensor:
        """One forward pass at ``sigma`` (the bench's single step)."""
        return self.adapter(model)(x, self.timestep(x, sigma), self.conditioning(x))


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
    adapter, cond = inputs.adapter(model), inputs.conditioning(x)
    sigmas = torch.linspace(1.0, 0.0, cfg.steps + 1).tolist()
    result = RunResult(output=x)
    with torch.inference_mode():
        for i in range(cfg.steps):
            if check is not None:
                check()
            if before_step is not None:
                before_step()
            t0 = time.perf_counter()
            out = adapter(x, inputs.timestep(x, sigmas[i]), cond)
            x = x + (sigmas[i + 1] - sigmas[i]) * out
            if x.device.type == "cuda":
                torch.cuda.synchronize(x.device)
            result.step_seconds.append(time.perf_counter() - t0)
            if progress is not None:
                progress(StepDone(i + 1, cfg.steps, result.step_seconds[-1]))
    result.output = x.to("cpu")
    return result
