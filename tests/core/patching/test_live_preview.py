"""A LoRA slider's live preview: the output follows the strength at once, no weight rewritten."""

from __future__ import annotations

import torch
from torch import nn

from core.ops import default_ops as ops
from core.patching.adapters import LoConAdapter, LoHaAdapter, LoRAAdapter
from core.patching.patcher import KeyPatch, ModelPatcher


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.conv = ops.Conv2d(3, 8, 3, padding=1, stride=2)
        self.qkv = ops.Linear(8, 24)
        self.out = ops.Linear(24, 5)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).mean(dim=(2, 3))
        return self.out(torch.tanh(self.qkv(h)))


def _factors(
    out: int, inp: int, rank: int, seed: int, kernel: tuple[int, ...] = ()
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "up": torch.randn(out, rank, *([1] * len(kernel)), generator=g, dtype=torch.float64) * 0.3,
        "down": torch.randn(rank, inp, *kernel, generator=g, dtype=torch.float64) * 0.3,
    }


def _patches() -> dict[str, list[KeyPatch]]:
    return {
        "conv.weight": [KeyPatch(LoConAdapter(**_factors(8, 3, 2, 1, (3, 3)), alpha=1.0, module="c"))],
        "qkv.weight": [
            KeyPatch(LoRAAdapter(**_factors(8, 8, 2, 2), module="q"), (0, 0, 8)),
            KeyPatch(LoRAAdapter(**_factors(8, 8, 2, 3), module="v"), (0, 16, 8)),
        ],
        "out.weight": [KeyPatch(LoRAAdapter(**_factors(5, 24, 3, 4), alpha=6.0, module="o"))],
    }


def test_preview_matches_baking_and_touches_no_weight() -> None:
    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    model = Net()
    patcher = ModelPatcher(model, intermediate_dtype=torch.float64)
    patcher.add_patches("style", _patches(), 1.0)
    patcher.apply()
    baked = {k: v.clone() for k, v in model.state_dict().items()}
    for strength in (0.25, -2.0, 0.0, 3.5):
        patcher.set_strength("style", strength)
        assert patcher.preview() is True
        live = model(x)
        for k, v in model.state_dict().items():
            assert torch.equal(v, baked[k]), k  # the preview rewrote nothing
        reference = ModelPatcher(Net(), intermediate_dtype=torch.float64)
        reference.add_patches("style", _patches(), strength)
        reference.apply()
        assert torch.allclose(live, reference.model(x), rtol=1e-10, atol=1e-12), strength
    patcher.apply()  # the slider stops: bake, side paths go away
    assert all(not getattr(m, "side_outputs", ()) for m in model.modules())
    assert torch.allclose(model(x), reference.model(x), rtol=1e-12, atol=1e-12)


def test_disabling_previews_as_minus_the_baked_strength() -> None:
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    model = Net()
    clean = model(x)
    patcher = ModelPatcher(model, intermediate_dtype=torch.float64)
    patcher.add_patches("style", _patches(), 0.7)
    patcher.apply()
    patcher.set_enabled("style", False)
    assert patcher.preview()
    assert torch.allclose(model(x), clean, rtol=1e-10, atol=1e-12)


def test_adapters_without_a_side_path_ask_for_a_bake() -> None:
    model = Net()
    patcher = ModelPatcher(model)
    g = torch.Generator().manual_seed(0)
    loha = LoHaAdapter(
        w1_a=torch.randn(5, 2, generator=g), w1_b=torch.randn(2, 24, generator=g),
        w2_a=torch.randn(5, 2, generator=g), w2_b=torch.randn(2, 24, generator=g), module="h",
    )  # fmt: skip
    patcher.add_patches("texture", {"out.weight": [KeyPatch(loha)]}, 0.5)
    assert patcher.preview() is False
    assert all(not getattr(m, "side_outputs", ()) for m in model.modules())
    patcher.add_patches("style", _patches(), 1.0)
    patcher.apply()
    patcher.remove("style")
    assert patcher.preview() is False  # a removed set is still baked: only apply() takes it out
