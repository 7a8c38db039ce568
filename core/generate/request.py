"""What a picture is made from: the typed request of ``loadout generate`` and the window's Generate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.errors import LoadoutError
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.patching.merge import LoraArg

#: The largest seed ComfyUI's seed widget allows (0xffffffffffffffff).
MAX_SEED = (1 << 64) - 1


@dataclass(frozen=True)
class ModelFiles:
    """Where the networks come from: an all-in-one checkpoint and/or separate component files
    (ComfyUI's UNETLoader / DualCLIPLoader / VAELoader). A separate file replaces the checkpoint's
    component of the same role."""

    checkpoint: Path | None = None
    diffusion_model: Path | None = None
    text_encoders: tuple[Path, ...] = ()
    vae: Path | None = None

    def __post_init__(self) -> None:
        if self.checkpoint is None and self.diffusion_model is None:
            raise LoadoutError(
                "nothing to generate with",
                why="neither a checkpoint nor a diffusion model was given",
                fix="Give a checkpoint, or --diffusion-model with --text-encoder and --vae",
                code="bad_argument",
            )

    @property
    def paths(self) -> tuple[Path, ...]:
        found = [self.checkpoint, self.diffusion_model, *self.text_encoders, self.vae]
        return tuple(p for p in found if p is not None)


@dataclass(frozen=True)
class Sampling:
    """KSampler's widgets, with ComfyUI's names and meanings."""

    seed: int = 0
    steps: int = 20
    cfg: float | None = None  # None: the family's usual value (see default_cfg)
    sampler: str = "euler"
    scheduler: str = "normal"
    denoise: float = 1.0
    guidance: float | None = None  # Flux-dev's distilled guidance (FluxGuidance; ComfyUI default 3.5)

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.seed <= MAX_SEED:
            out.append(f"seed must be between 0 and {MAX_SEED}, not {self.seed}")
        if not 1 <= self.steps <= 10_000:
            out.append(f"steps must be between 1 and 10000, not {self.steps}")
        if self.cfg is not None and not 0.0 <= self.cfg <= 100.0:
            out.append(f"CFG must be between 0 and 100, not {self.cfg}")
        if not 0.0 < self.denoise <= 1.0:
            out.append(f"denoise must be above 0 and at most 1, not {self.denoise}")
        return out


def default_cfg(family: str | None) -> float:
    """The CFG a family is usually run at when none is given: guidance-distilled Flux and Chroma
    run without classifier-free guidance (1), SD3 at 4.5, the UNet families at 7 (A1111's default)."""
    if family in ("flux-dev", "flux-schnell", "flux-fill", "chroma"):
        return 1.0
    if family in ("sd3", "sd3.5-medium", "sd3.5-large"):
        return 4.5
    return 7.0


@dataclass(frozen=True)
class ImageSettings:
    """What the Generate panel holds: the prompt and KSampler's settings, with no files."""

    prompt: str
    negative: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    width: int = 512
    height: int = 512
    batch: int = 1
    init_image: Path | None = None  # img2img: the picture to start from (sampling.denoise < 1)
    controlnets: tuple[ControlNetUse, ...] = ()  # applied in order (core/generate/controlnet.py)
    mask_image: Path | None = None  # inpainting: white = repaint (with init_image)
    refiner: RefinerUse | None = None  # the SDXL refiner hand-off (core/generate/refiner.py)

    def __post_init__(self) -> None:
        problems = self.sampling.problems()
        if self.width < 64 or self.height < 64 or self.width % 8 or self.height % 8:
            problems.append(f"size {self.width}x{self.height} must be multiples of 8, at least 64")
        if self.width * self.height > 4096 * 4096:
            problems.append(f"size {self.width}x{self.height} is larger than 4096x4096 in area")
        if not 1 <= self.batch <= 64:
            problems.append(f"batch must be between 1 and 64, not {self.batch}")
        if self.init_image is None and self.sampling.denoise < 1.0:
            problems.append("denoise below 1 needs a starting image (--init)")
        if self.mask_image is not None and self.init_image is None:
            problems.append("a mask needs the picture it masks (--init)")
        if problems:
            raise LoadoutError(
                "these generation settings cannot be used",
                why="; ".join(problems),
                fix="Change the settings named above",
                code="bad_argument",
            )


@dataclass(frozen=True)
class GenerateRequest:
    models: ModelFiles
    image: ImageSettings
    loras: tuple[LoraArg, ...] = ()
    output: Path = Path("loadout.png")  # a file (batch: name-2.png, ...) or, with output_is_folder, a folder
    output_is_folder: bool = False
    device: str = "cpu"
    dtype: torch.dtype | None = None  # compute dtype of the diffusion model; None: the policy decides
    vram_limit: int | None = None
    #: a strength sweep of the first LoRA: one picture per strength and their grid (empty: none)
    sweep: tuple[float, ...] = ()
