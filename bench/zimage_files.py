"""Real-size random-weight files for the Z-Image picture bench (``bench.zimage --picture``).

Each file has a released model's key layout and true shapes, stored as the ``*_fp8_scaled`` files
are (``bench.load.formatted``: ComfyUI's ``scaled_fp8`` marker, every linear matrix float8_e4m3fn
with a float32 ``scale_weight``; the embeddings, norms and biases bf16), with values that keep a
30-layer forward finite: fp8 values standard normal with the scale ``1 / sqrt(fan-in)`` (so each
weight is N(0, 1/fan-in), as the ``--random`` model draws it), norms N(1, 0.1), other matrices
N(0, 1/fan-in) and vectors N(0, 0.1) in bf16. Written once to a temporary name, kept while the
header and size match.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

CHUNK = 1 << 24  # elements of a bf16 tensor drawn at once (64 MiB of float32)


def _fp8_block(nbytes: int, seed: int) -> memoryview:
    g = torch.Generator().manual_seed(seed)
    block = torch.randn(nbytes, generator=g).clamp(-8, 8).to(torch.float8_e4m3fn)
    return memoryview(block.view(torch.uint8).numpy().tobytes())


def _bf16(key: str, shape: tuple[int, ...], gen: torch.Generator) -> bytes:
    """A bf16 tensor's bytes by the rule above, drawn in row chunks (no whole float32 copy)."""
    n = math.prod(shape)
    if "norm" in key and len(shape) == 1:
        mean, std = 1.0, 0.1
    elif len(shape) >= 2:
        mean, std = 0.0, 1.0 / math.sqrt(math.prod(shape[1:]))
    else:
        mean, std = 0.0, 0.1
    parts = []
    for start in range(0, n, CHUNK):
        part = torch.randn(min(CHUNK, n - start), generator=gen) * std + mean
        parts.append(part.to(torch.bfloat16).view(torch.uint8).numpy().tobytes())
    return b"".join(parts)


def write_random(path: Path, typed: Mapping[str, Any], seed: int = 0) -> Path:
    """``typed`` (name -> (dtype, shape), dtypes BF16 / F8_E4M3 / F32 scales) as a real file."""
    from tests.fixtures.st_files import header_bytes

    head, data_size = header_bytes(typed, metadata={"modelspec.title": path.stem})
    if path.exists() and path.stat().st_size == len(head) + data_size:
        with open(path, "rb") as fh:
            if fh.read(len(head)) == head:
                return path
    path.parent.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    block, at = _fp8_block(1 << 26, seed), 0
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for key, (dtype, shape) in typed.items():
            if dtype == "F8_E4M3":
                left = math.prod(shape)
                while left:
                    n = min(left, len(block) - at)
                    fh.write(block[at : at + n])
                    at, left = (at + n) % len(block), left - n
            elif dtype == "F32":  # a scale: 1 / sqrt(fan-in) of its weight
                weight = typed[key[: -len(".scale_weight")] + ".weight"][1]
                fh.write(torch.tensor(1.0 / math.sqrt(math.prod(weight[1:]))).numpy().tobytes())
            elif dtype == "BF16":
                fh.write(_bf16(key, tuple(shape), gen))
            else:
                raise ValueError(f"{key}: {dtype} is not written here")
    os.replace(tmp, path)
    return path


def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def picture_files(folder: Path) -> tuple[Path, Path, Path]:
    """Z-Image Turbo (6.15 B) and Qwen3-4B in the fp8-scaled layout, the Flux VAE in bf16."""
    from bench.load import formatted
    from core.models.llm import LlmConfig, LlmTextModel
    from core.models.nextdit import NextDiT, NextDiTConfig
    from tests.fixtures.diffusion_layouts_components import kl_vae

    dit = write_random(
        folder / "z_image_turbo_fp8_scaled_random.safetensors",
        formatted(shapes(NextDiT(NextDiTConfig(), device="meta")), "fp8"),
        seed=1,
    )
    text = write_random(
        folder / "qwen3-4b_fp8_scaled_random.safetensors",  # the name bench.load measures
        formatted(shapes(LlmTextModel(LlmConfig.preset("qwen3-4b"), device="meta")), "fp8"),
        seed=2,
    )
    vae = write_random(
        folder / "ae_random.safetensors", formatted(dict(kl_vae(z=16, quant_conv=False)), "bf16"), seed=3
    )
    return dit, text, vae
