"""A streamed quantized (GGUF) or scaled fp8 embedding table sends and decodes only the rows a
prompt looks up: it is never materialised whole (a T5 table in fp32 is ~0.5 GiB), and the rows
are bit for bit the resident table's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.ops.layers import Embedding
from core.ops.streaming import stream_layers, unstream_layers
from core.quant.fp8_weight import ScaledFp8Weight
from core.quant.tensor import QuantizedWeight
from tests.fixtures.fp8_scaled import quantize

VOCAB, WIDTH = 512, 64


class LargestFloat(TorchDispatchMode):
    """The most elements of any floating-point tensor (of ``dtype`` when given) an op produced."""

    def __init__(self, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.most = 0
        self.dtype = dtype

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and self.dtype in (None, t.dtype):
                self.most = max(self.most, t.numel())
        return out


def _table(kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(VOCAB, WIDTH, generator=g)
    if kind == "fp8":
        q, s = quantize(values)
        return ScaledFp8Weight(q, s)
    raw = quants.quantize(values.numpy(), GGMLQuantizationType.Q8_0)
    return QuantizedWeight(torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1), "Q8_0", (VOCAB, WIDTH))


@pytest.mark.parametrize("kind", ["gguf", "fp8"])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_a_streamed_table_decodes_only_the_rows_looked_up(kind: str, dtype: torch.dtype | None) -> None:
    layer = Embedding(VOCAB, WIDTH, device="meta")
    layer.weight = torch.nn.Parameter(_table(kind), requires_grad=False)
    ids = torch.tensor([[1, 7, 7, 300, 511]])
    with torch.no_grad():
        resident = layer(ids, dtype)
        group = stream_layers(layer, [""], "cpu")
        try:
            with LargestFloat() as seen:
                streamed = layer(ids, dtype)
        finally:
            unstream_layers(layer, [""])
    assert torch.equal(streamed, resident) and streamed.dtype == (dtype or torch.float32)
    assert seen.most <= ids.numel() * WIDTH  # never the table: only the rows were decoded
    assert group.stats.bytes_total == ids.numel() * layer.weight.nbytes // VOCAB
