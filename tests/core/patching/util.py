"""Shared helpers for the adapter tests."""

from __future__ import annotations

import torch
from torch import Tensor

from core.patching.adapters import (
    Adapter,
    BOFTAdapter,
    DiffAdapter,
    GLoRAAdapter,
    LoConAdapter,
    LoHaAdapter,
    LoKrAdapter,
    LoRAAdapter,
    OFTAdapter,
    SetWeightAdapter,
)

TOLERANCE = 1e-5


def rel_err(ours: Tensor, ref: Tensor, base: Tensor) -> float:
    """``||ours - ref|| / ||ref - base||``: the error relative to the size of the patch itself."""
    change = (ref.double() - base.double()).norm()
    assert change > 0, "the reference patch is empty; randomise the factors"
    return float((ours.double() - ref.double()).norm() / change)


def assert_matches(label: str, ours: Tensor, ref: Tensor, base: Tensor) -> float:
    assert ours.shape == ref.shape == base.shape, (ours.shape, ref.shape, base.shape)
    assert ours.dtype == base.dtype
    err = rel_err(ours, ref, base)
    print(f"{label}: relative error {err:.2e}")
    assert err <= TOLERANCE, f"{label}: relative error {err:.3e} > {TOLERANCE}"
    return err


def randomise(module: torch.nn.Module, *, std: float = 1.0) -> None:
    """Fill every parameter with noise (several start at zero); DoRA magnitudes stay positive."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "magnitude" in name or name.endswith("dora_scale"):
                param.copy_(torch.rand_like(param) + 0.5)
            elif name.endswith("rescale"):
                param.copy_(1 + 0.2 * torch.randn_like(param))
            else:
                param.normal_(0.0, std)


def rand(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


def cases() -> dict[str, tuple[Adapter, tuple[int, ...]]]:
    """One adapter of every kind (and the DoRA variant) with the weight shape it patches."""
    return {
        "lora": (LoRAAdapter(rand(10, 4), rand(4, 12), alpha=2.0), (10, 12)),
        "locon": (
            LoConAdapter(rand(8, 4, 1, 1), rand(4, 6, 1, 1), rand(4, 4, 3, 3), alpha=2.0),
            (8, 6, 3, 3),
        ),
        "dora": (
            LoRAAdapter(rand(10, 4), rand(4, 12), alpha=2.0, dora_scale=rand(10, 1).abs() + 0.5),
            (10, 12),
        ),
        "loha": (
            LoHaAdapter(rand(10, 4), rand(4, 12), rand(10, 4, seed=1), rand(4, 12, seed=1), alpha=2.0),
            (10, 12),
        ),
        "lokr": (LoKrAdapter(w1=rand(2, 3), w2_a=rand(5, 2), w2_b=rand(2, 4), alpha=1.0), (10, 12)),
        "glora": (
            GLoRAAdapter(rand(12, 3), rand(3, 12), rand(10, 3), rand(3, 12, seed=1), alpha=1.5),
            (10, 12),
        ),
        "oft": (OFTAdapter(0.3 * rand(5, 2, 2)), (10, 12)),
        "boft": (BOFTAdapter(0.3 * rand(2, 4, 2, 2)), (8, 12)),
        "diff": (DiffAdapter(rand(10, 12)), (10, 12)),
        "set": (SetWeightAdapter(rand(10, 12)), (10, 12)),
    }


CASES = sorted(cases())


def case(name: str) -> tuple[Adapter, Tensor]:
    adapter, shape = cases()[name]
    return adapter, rand(*shape, seed=7)
