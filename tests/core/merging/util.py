"""Model files for the merge tests: the tiny real-architecture checkpoints (real key names, real
detection) written to disk with seeded variations, and ComfyUI's patch arithmetic in plain torch."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

Tensors = dict[str, torch.Tensor]
UNET = "model.diffusion_model."


def varied(tensors: Tensors, seed: int, dtype: torch.dtype | None = None, scale: float = 0.05) -> Tensors:
    """``tensors`` with seeded noise added to every float tensor (a fine-tune of the same model),
    diffusion weights cast to ``dtype`` when given."""
    gen = torch.Generator().manual_seed(seed)
    out: Tensors = {}
    for key, v in tensors.items():
        if v.is_floating_point():
            v = (v.float() + scale * torch.randn(v.shape, generator=gen)).to(v.dtype)
            if dtype is not None and not key.startswith(("first_stage_model.", "vae.", "cond", "text_")):
                v = v.to(dtype)
        out[key] = v
    return out


def checkpoints(
    folder: Path, family: str, n: int, dtypes: tuple[torch.dtype | None, ...] = (), *, unet_only: bool = False
) -> list[Path]:
    """``n`` checkpoints of ``family``: A is the tiny checkpoint with its diffusion model in fp16,
    B, C fine-tunes of it (``unet_only``: diffusion-model files, keys without the prefix)."""
    base = {k: (v.half() if v.is_floating_point() and k.startswith(UNET) else v) for k, v in
            checkpoint_tensors(family).items()}  # fmt: skip
    if unet_only:
        base = {k[len(UNET) :]: v for k, v in base.items() if k.startswith(UNET)}
    paths = [write_tensors(folder / f"{family}-a.safetensors", base)]
    for i in range(1, n):
        dtype = dtypes[i] if i < len(dtypes) else None
        paths.append(write_tensors(folder / f"{family}-{'abc'[i]}.safetensors", varied(base, 10 + i, dtype)))
    return paths


def patch(weight: torch.Tensor, other: torch.Tensor, strength: float, strength_model: float) -> torch.Tensor:
    """ComfyUI's ``calculate_weight`` for one "diff" patch, on a float32 copy (plain torch)."""
    w = weight.float().clone()
    if strength_model != 1.0:
        w = w * strength_model
    if strength != 0.0:
        w = w + strength * other.float()
    return w


def weighted(a: torch.Tensor, b: torch.Tensor, ratio: float) -> torch.Tensor:
    """ModelMergeSimple: model1.clone().add_patches(model2, 1 - ratio, ratio)."""
    return patch(a, b, 1.0 - ratio, ratio)


def add_difference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, m: float) -> torch.Tensor:
    """ModelMergeSubtract(B, C, m) -> ModelMergeAdd(A, that)."""
    return patch(a, patch(b, c, -m, m), 1.0, 1.0)
