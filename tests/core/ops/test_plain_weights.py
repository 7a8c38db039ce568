"""A weight's autograd flag must not change a result. On the CPU, ``F.linear`` takes another path
for a weight that requires grad (even under ``no_grad``) when the input is batch-strided (a slice
of a joint text+image sequence, as in MMDiT and Flux blocks), and resident weights are parameters
while streamed and patched copies are plain tensors: so the ops layer computes with plain tensors."""

from __future__ import annotations

import pytest
import torch

from core.ops.layers import Linear


@pytest.mark.parametrize("tokens", [1, 5, 16])
def test_a_parameter_and_a_plain_copy_give_the_same_bits(tokens: int) -> None:
    torch.manual_seed(0)
    layer = Linear(64, 64, device="cpu")
    layer.weight = torch.nn.Parameter(torch.randn(64, 64), requires_grad=True)
    layer.bias = torch.nn.Parameter(torch.randn(64), requires_grad=True)
    x = torch.randn(2, 21, 64)[:, :tokens]  # batch stride 21*64: a slice of a longer sequence
    with torch.no_grad():
        ours = layer(x)
        plain = torch.nn.functional.linear(x, layer.weight.detach().clone(), layer.bias.detach().clone())
    assert torch.equal(ours, plain)
