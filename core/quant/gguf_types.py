"""GGML tensor types as data: id, name, elements per block, bytes per block (pure).

The values are the GGML format's (they are what a GGUF file's tensor infos refer to); which of them
Loadout can dequantize is :data:`DEQUANTIZABLE`. ``F16``/``BF16``/``F32`` tensors in a GGUF file
are loaded as ordinary tensors; only block-quantized types stay quantized in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GGMLType:
    id: int
    name: str
    block: int  # elements per block
    block_bytes: int  # bytes per block

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.block_bytes / self.block

    def nbytes(self, numel: int) -> int:
        return (numel // self.block) * self.block_bytes


_TABLE = (
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
)

GGML_TYPES: dict[int, GGMLType] = {row[0]: GGMLType(*row) for row in _TABLE}
BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES.values()}

#: Plain (not block-quantized) types and the torch dtype they load as.
PLAIN_DTYPES: dict[str, torch.dtype] = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
}

#: Block-quantized types Loadout dequantizes (``core.quant.dequant``).
DEQUANTIZABLE: frozenset[str] = frozenset(
    {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
)


def is_quantized_name(name: str) -> bool:
    return name not in PLAIN_DTYPES
