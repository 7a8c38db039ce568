"""The ops tests, and their shared helpers: tiny real networks, LoRA stacks on them, parameter snapshots."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn

from core.ops.layers import CastWeights
from core.patching.adapters import DiffAdapter, LoConAdapter, LoRAAdapter
from core.patching.patcher import KeyPatch
from tests.fixtures.tiny_models import TINY_FLUX, TINY_UNET_SD1, Tiny

MODELS: dict[str, Tiny] = {"unet": TINY_UNET_SD1, "flux": TINY_FLUX}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The tiny nets run in milliseconds on one thread; a contended intra-op pool makes them 100x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def op_layers(module: nn.Module) -> list[str]:
    return [n for n, m in module.named_modules() if isinstance(m, CastWeights) and m.weight is not None]


def lora_patches(
    module: nn.Module, names: list[str], seed: int, scale: float = 0.3, bias_diffs: bool = True
) -> dict[str, list[KeyPatch]]:
    """A LoRA (LoCon on convolutions) on each named layer's weight and a full diff on every third bias."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, list[KeyPatch]] = {}
    for i, name in enumerate(names):
        layer = module.get_submodule(name)
        w: Tensor = layer.weight
        rank = 2
        if w.ndim == 2:
            up, down = torch.randn(w.shape[0], rank, generator=g), torch.randn(rank, w.shape[1], generator=g)
            adapter: LoRAAdapter = LoRAAdapter(up * scale, down / w.shape[1] ** 0.5, alpha=1.0, module=name)
        elif w.ndim == 4:
            up = torch.randn(w.shape[0], rank, 1, 1, generator=g)
            down = torch.randn(rank, *w.shape[1:], generator=g) / w[0].numel() ** 0.5
            adapter = LoConAdapter(up * scale, down, alpha=1.0, module=name)
        else:
            continue
        out[f"{name}.weight"] = [KeyPatch(adapter)]
        bias = getattr(layer, "bias", None)
        if bias_diffs and i % 3 == 0 and bias is not None:
            diff = DiffAdapter(torch.randn(bias.shape, generator=g) * 0.05, module=name)
            out[f"{name}.bias"] = [KeyPatch(diff)]
    return out


Snapshot = dict[str, tuple[Tensor, int, Tensor]]


def snapshot(module: nn.Module) -> Snapshot:
    return {k: (p, p.data_ptr(), p.detach().clone()) for k, p in module.named_parameters()}


def assert_untouched(module: nn.Module, before: Snapshot, *, same_objects: bool = True) -> None:
    now = dict(module.named_parameters())
    assert now.keys() == before.keys()
    for key, (param, ptr, values) in before.items():
        if same_objects:
            assert now[key] is param, f"{key}: parameter object replaced"
        assert now[key].data_ptr() == ptr, f"{key}: storage replaced"
        assert now[key].dtype == values.dtype and torch.equal(now[key], values), f"{key}: values changed"
