"""``loadout upscale MODEL IMAGE -o OUT``: one picture through an upscale model, placed by the
memory manager on the device asked for (``--vram-limit`` simulates a card of that size, on the
CPU too), tiled as ComfyUI's ImageUpscaleWithModel tiles; the PNG is written atomically."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from core.errors import ModelMismatchError
from core.generate.command import read_picture
from core.generate.png import save_png, to_uint8_rgb
from core.memory.devices import device_named
from core.memory.peak import peak_bytes, reset_peak
from core.session.placement import Placement, PlacementConfig
from core.upscale.model import load_upscale_model
from core.upscale.placed import ROLE, manager_name, run_upscale
from core.upscale.tiled import OVERLAP, TILE


@dataclass(frozen=True)
class UpscaleRequest:
    model: Path
    image: Path
    output: Path
    device: str = "cpu"
    vram_limit: int | None = None
    tile: int = TILE
    overlap: int = OVERLAP


@dataclass(frozen=True)
class UpscaleResult:
    output: Path
    architecture: str
    scale: int
    width: int
    height: int
    seconds: float
    peak_bytes: int
    events: tuple[dict[str, object], ...] = ()

    def to_json(self) -> dict[str, object]:
        """``loadout upscale --json`` (docs/cli.md)."""
        return {
            "output": str(self.output), "architecture": self.architecture, "scale": self.scale,
            "size": [self.width, self.height], "seconds": round(self.seconds, 4),
            "peak_bytes": self.peak_bytes, "events": list(self.events),
        }  # fmt: skip


def upscale_file(
    request: UpscaleRequest,
    *,
    progress: Callable[[int, int], None] | None = None,
    interrupt: threading.Event | None = None,
) -> UpscaleResult:
    """Everything ``loadout upscale`` does; ``interrupt`` stops it between layers and tiles, before
    anything is written."""
    placement = Placement(
        device_named(request.device), PlacementConfig(simulate_bytes=request.vram_limit or 0),
        interrupt=interrupt, cpu_is_device=True,
    )  # fmt: skip
    rgb = read_picture(request.image)
    model = load_upscale_model(request.model)
    if model.input_channels != 3 or model.output_channels != 3:
        raise ModelMismatchError(
            f"{request.model.name} takes {model.input_channels} and gives {model.output_channels} channels",
            why="Loadout upscales RGB pictures",
            fix="Use an RGB upscale model (most ESRGAN, SwinIR, ... files are)",
            code="unsupported_upscale_model",
        )
    pictures = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)[None].float() / 255.0
    device = torch.device(placement.manager.device if placement.active else "cpu")
    reset_peak(device)
    started = placement.events.clock()
    t0 = time.perf_counter()
    out = run_upscale(
        placement, model, pictures, check=placement.manager.check, progress=progress or (lambda d, t: None),
        tile=request.tile, overlap=request.overlap,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    save_png(request.output, to_uint8_rgb(out[0] * 2.0 - 1.0))
    name = manager_name(model)
    events = tuple(
        {**e.to_json(), "role": ROLE if e.model == name else ""}
        for e in placement.events.events()
        if e.timestamp >= started
    )
    return UpscaleResult(
        request.output, model.architecture, model.scale, out.shape[3], out.shape[2], seconds,
        peak_bytes(device), events,
    )  # fmt: skip
