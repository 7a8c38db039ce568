"""Real-size random-weight safetensors files for the picture benches (``bench.zimage --picture``,
``bench.qwen_image``): a released model's key layout and true shapes, real random values of each
stored dtype, written once to a temporary name and kept while the header and size match.

Values keep a deep forward finite: in the ``*_fp8_scaled`` layout (``bench.load.formatted``) fp8
values are standard normal with the float32 scale ``1 / sqrt(fan-in)`` beside them (so each weight
is N(0, 1/fan-in)); plain fp8 matrices (no scale: ``qwen_image_fp8_e4m3fn``) hold N(0, 1/fan-in)
themselves, rounded to e4m3fn; bf16 norms N(1, 0.1), other bf16 matrices N(0, 1/fan-in), other
vectors N(0, 0.1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

CHUNK = 1 << 24  # elements of a bf16 tensor drawn at once (64 MiB of float32)
FP8_BLOCK = 1 << 26  # bytes of fp8 values drawn once and written over and over


def _fp8_block(nbytes: int, seed: int, std: float = 1.0) -> memoryview:
    g = torch.Generator().manual_seed(seed)
    block = (torch.randn(nbytes, generator=g) * std).clamp(-8 * std, 8 * std).to(torch.float8_e4m3fn)
    return memoryview(block.view(torch.uint8).numpy().tobytes())


def _fan_in(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:])


def _bf16(key: str, shape: tuple[int, ...], gen: torch.Generator) -> bytes:
    """A bf16 tensor's bytes by the rule above, drawn in row chunks (no whole float32 copy)."""
    n = math.prod(shape)
    if "norm" in key and len(shape) == 1:
        mean, std = 1.0, 0.1
    elif len(shape) >= 2:
        mean, std = 0.0, 1.0 / math.sqrt(_fan_in(shape))
    else:
        mean, std = 0.0, 0.1
    parts = []
    for start in range(0, n, CHUNK):
        part = torch.randn(min(CHUNK, n - start), generator=gen) * std + mean
        parts.append(part.to(torch.bfloat16).view(torch.uint8).numpy().tobytes())
    return b"".join(parts)


class _Fp8Writer:
    """fp8 values from one random block per standard deviation, continued across tensors."""

    def __init__(self, seed: int, nbytes: int) -> None:
        self.seed, self.nbytes = seed, nbytes
        self.blocks: dict[float, memoryview] = {}
        self.at: dict[float, int] = {}

    def write(self, fh: Any, count: int, std: float) -> None:
        if std not in self.blocks:
            self.blocks[std] = _fp8_block(self.nbytes, self.seed + len(self.blocks), std)
            self.at[std] = 0
        block, at = self.blocks[std], self.at[std]
        while count:
            n = min(count, len(block) - at)
            fh.write(block[at : at + n])
            at, count = (at + n) % len(block), count - n
        self.at[std] = at


def write_random(path: Path, typed: Mapping[str, Any], seed: int = 0, fp8_block: int = FP8_BLOCK) -> Path:
    """``typed`` (name -> (dtype, shape), dtypes BF16 / F8_E4M3 / F32 scales) as a real file."""
    from tests.fixtures.st_files import header_bytes

    head, data_size = header_bytes(typed, metadata={"modelspec.title": path.stem})
    if path.exists() and path.stat().st_size == len(head) + data_size:
        with open(path, "rb") as fh:
            if fh.read(len(head)) == head:
                return path
    path.parent.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    fp8 = _Fp8Writer(seed, fp8_block)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for key, (dtype, shape) in typed.items():
            if dtype == "F8_E4M3":
                scaled = key.endswith(".weight") and key[: -len("weight")] + "scale_weight" in typed
                std = 1.0 if scaled or len(shape) < 2 else 1.0 / math.sqrt(_fan_in(tuple(shape)))
                fp8.write(fh, math.prod(shape), std)
            elif dtype == "F32":  # a scale: 1 / sqrt(fan-in) of its weight
                weight = typed[key[: -len(".scale_weight")] + ".weight"][1]
                fh.write(torch.tensor(1.0 / math.sqrt(_fan_in(tuple(weight)))).numpy().tobytes())
            elif dtype == "BF16":
                fh.write(_bf16(key, tuple(shape), gen))
            else:
                raise ValueError(f"{key}: {dtype} is not written here")
    os.replace(tmp, path)
    return path


def shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}
