"""The end of a generation: the A1111 parameters of its pictures and the PNGs that carry them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core.files.atomic import AtomicBatch
from core.generate.events import GeneratedImage, GenerateProgress
from core.generate.hashes import FileHashes
from core.generate.naming import next_free
from core.generate.parameters import EmbeddingUse, GenerationParameters, LoraUse, format_parameters
from core.generate.png import png_bytes, to_uint8_rgb
from core.generate.request import ImageSettings
from core.version import engine_version


@dataclass(frozen=True, kw_only=True)
class Made:
    """What the parameters say a picture was made with, beyond the request's settings."""

    cfg: float  # the CFG used (the family's usual one when the request left it unset)
    guidance: float | None  # the distilled guidance used (None: the family takes none)
    model_path: Path
    #: (file, model strength, clip strength, block weights as written or "", the prompt it acts on
    #: only or None), enabled only
    loras: tuple[tuple[Path, float, float, str, str | None], ...]
    img2img: bool
    #: the embedding files the prompts used (name as written, file)
    embeddings: tuple[tuple[str, Path], ...] = ()


def parameters_for(
    settings: ImageSettings,
    made: Made,
    size: tuple[int, int],
    hashes: FileHashes,
    check: Callable[[], None] | None = None,
) -> GenerationParameters:
    """The A1111 parameters of a picture of ``size`` (width, height)."""
    s = settings.sampling
    loras = tuple(LoraUse(p.stem, m, c, hashes.lora_hash(p, check), w, on) for p, m, c, w, on in made.loras)
    files = dict.fromkeys(path for _, path in made.embeddings)  # one entry per file, as A1111
    embeddings = tuple(EmbeddingUse(p.stem, hashes.sha256(p, check)[:12]) for p in files)
    return GenerationParameters(
        prompt=settings.prompt, negative=settings.negative, steps=s.steps, sampler=s.sampler,
        scheduler=s.scheduler, cfg=made.cfg, seed=s.seed, width=size[0], height=size[1],
        model=made.model_path.stem, model_hash=hashes.model_hash(made.model_path, check), loras=loras,
        denoise=s.denoise if made.img2img else None, guidance=made.guidance, clip_skip=settings.clip_skip,
        embeddings=embeddings, patches=settings.guidance_patches, regions=settings.regions,
    )  # fmt: skip


def save_pictures(
    pixels: torch.Tensor,
    params: GenerationParameters,
    paths: Sequence[Path],
    check: Callable[[], None],
    progress: Callable[[GenerateProgress], None] = lambda p: None,
    *,
    overwrite: bool = True,
) -> list[GeneratedImage]:
    """Write each picture of the batch (B, 3, H, W in [-1, 1]) as a PNG with its parameters.

    All or nothing: an interrupt (or a full disk) while saving a batch leaves no picture of it.
    ``overwrite=False`` (numbered pictures): nothing is overwritten; a number another writer took
    meanwhile becomes the next free one, and the pictures returned carry the names they got."""
    images = []
    with AtomicBatch(replace=overwrite, taken=None if overwrite else next_free) as batch:
        for i, path in enumerate(paths):
            check()
            # a batch shares one seed (one noise draw for all, as ComfyUI): the position tells them apart
            if len(pixels) > 1:
                params = replace(
                    params, extra={**params.extra, "Batch size": str(len(pixels)), "Batch pos": str(i)}
                )
            infotext = format_parameters(params, version=f"Loadout {engine_version()}")
            batch.write_bytes(path, png_bytes(to_uint8_rgb(pixels[i]), infotext))
            progress(GenerateProgress("save", i + 1, len(pixels)))
            label = f"{i + 1}/{len(pixels)}" if len(pixels) > 1 else ""
            images.append(GeneratedImage(path, params, infotext, label))
    return [
        image if image.path == path else replace(image, path=path)
        for image, path in zip(images, batch.written, strict=True)
    ]
