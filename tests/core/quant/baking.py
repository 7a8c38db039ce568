"""What quantized-weight tests compare against: the same network with reference values baked in."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from core.loading.loader import LoadedComponent
from core.quant.tensor import DeferredWeight
from tests.fixtures.tiny_models import Tiny


def baked(tiny: Tiny, loaded: LoadedComponent, reference: dict[str, Tensor]) -> nn.Module:
    """``tiny``'s network with ``reference[key]`` in place of every deferred (GGUF or scaled fp8)
    weight of ``loaded``; plain tensors are the loaded ones themselves (same memory, so same
    alignment: CPU matmul kernels may round differently for differently aligned operands)."""
    state = loaded.module.state_dict(keep_vars=True)
    values = {k: reference[k].clone() if isinstance(v, DeferredWeight) else v for k, v in state.items()}
    module = tiny.architecture.build(tiny.config, "cpu", None)
    module.load_state_dict(values, strict=True, assign=True)
    return module.eval().requires_grad_(False)


def same(a: tuple[Tensor, ...], b: tuple[Tensor, ...]) -> bool:
    """Bit-for-bit equal outputs."""
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
