"""ModelPatcher: exact, incremental, and restorable."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from core.ops import default_ops as ops
from core.patching.adapters import DiffAdapter, LoHaAdapter, LoRAAdapter, OFTAdapter, Patch, apply_patches
from core.patching.patcher import KeyPatch, ModelPatcher


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = ops.Linear(16, 24)
        self.b = ops.Linear(24, 48)  # "fused" qkv-like weight: three 16-row slices
        self.c = ops.Conv2d(4, 8, 3, padding=1)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g).half()
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _lora(out: int, inp: int, rank: int, seed: int, alpha: float | None = None) -> LoRAAdapter:
    g = torch.Generator().manual_seed(seed)
    return LoRAAdapter(
        up=torch.randn(out, rank, generator=g) * 0.1,
        down=torch.randn(rank, inp, generator=g) * 0.1,
        alpha=alpha,
        module=f"m{seed}",
    )


def _sets() -> dict[str, dict[str, list[KeyPatch]]]:
    g = torch.Generator().manual_seed(9)
    return {
        "style": {
            "a.weight": [KeyPatch(_lora(24, 16, 4, 1, alpha=2.0))],
            "b.weight": [
                KeyPatch(_lora(16, 24, 4, 2), (0, 0, 16)),
                KeyPatch(_lora(16, 24, 4, 3), (0, 16, 16)),
            ],
        },
        "detail": {
            "a.weight": [
                KeyPatch(
                    LoHaAdapter(
                        w1_a=torch.randn(24, 2, generator=g),
                        w1_b=torch.randn(2, 16, generator=g),
                        w2_a=torch.randn(24, 2, generator=g),
                        w2_b=torch.randn(2, 16, generator=g),
                        module="h",
                    )
                )
            ],
            "a.bias": [KeyPatch(DiffAdapter(torch.randn(24, generator=g) * 0.01, module="hb"))],
        },
        "rotate": {
            "b.weight": [KeyPatch(OFTAdapter(torch.randn(3, 16, 16, generator=g) * 0.01, module="o"))]
        },
    }


def _reference(model_state: dict[str, torch.Tensor], patcher: ModelPatcher) -> dict[str, torch.Tensor]:
    """Every weight computed from scratch with apply_patches, independent of the patcher's caches."""
    out = {}
    for key, w in model_state.items():
        patches = [
            Patch(p.adapter, s.strength, p.offset)
            for s in patcher.sets
            if s.active and key in s.patches
            for p in s.patches[key]
        ]
        out[key] = apply_patches(w, patches) if patches else w
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _assert_state(model: nn.Module, expected: dict[str, torch.Tensor]) -> None:
    for k, v in model.state_dict().items():
        assert v.dtype == expected[k].dtype, k
        assert torch.equal(_bits(v), _bits(expected[k])), k


@pytest.mark.parametrize("cache_bytes", [0, 1 << 30])
def test_random_sequences_match_reference_and_unpatch_is_bit_exact(cache_bytes: int) -> None:
    model = Net()
    original = {k: v.clone() for k, v in model.state_dict().items()}
    patcher = ModelPatcher(model, delta_cache_bytes=cache_bytes)
    rng = random.Random(4)
    for name, patches in _sets().items():
        patcher.add_patches(name, patches, strength=rng.uniform(-1.5, 1.5))
    for _ in range(40):
        op = rng.choice(["strength", "strength", "toggle", "apply", "reorder", "zero"])
        name = rng.choice([s.id for s in patcher.sets])
        if op == "strength":
            patcher.set_strength(name, rng.uniform(-7, 7))
        elif op == "zero":
            patcher.set_strength(name, 0.0)
        elif op == "toggle":
            patcher.set_enabled(name, not next(s for s in patcher.sets if s.id == name).enabled)
        elif op == "reorder":
            order = [s.id for s in patcher.sets]
            rng.shuffle(order)
            patcher.reorder(order)
        patcher.apply()
        _assert_state(model, _reference(original, patcher))
    still_patched = len(patcher.patched_keys() & {"a.weight", "a.bias", "b.weight"})
    assert patcher.unpatch() == still_patched
    _assert_state(model, original)


def test_strength_change_recomputes_only_that_sets_keys_from_cached_deltas() -> None:
    model = Net()
    patcher = ModelPatcher(model)
    sets = _sets()
    patcher.add_patches("style", sets["style"])
    patcher.add_patches("detail", {"a.bias": sets["detail"]["a.bias"]})
    first = patcher.apply()
    assert first.recomputed == 3
    patcher.set_strength("detail", 0.5)
    report = patcher.apply()
    assert (report.recomputed, report.unchanged) == (1, 2)
    assert report.cached_deltas == 1
    patcher.set_enabled("style", False)
    report = patcher.apply()
    assert report.restored == 2 and report.recomputed == 0


def test_clones_share_weights_and_unchanged_stack_costs_nothing() -> None:
    model = Net()
    base = ModelPatcher(model)
    base.add_patches("style", _sets()["style"], 0.8)
    base.apply()
    twin = base.clone()
    assert twin.identity() == base.identity() and twin.model is model
    assert twin.apply().recomputed == 0
    twin.set_strength("style", -0.3)
    assert twin.identity() != base.identity()
    assert twin.apply().recomputed == 2
    assert base.sets[0].strength == 0.8  # the clone's change does not leak into the original's list


def test_patched_forward_equals_merged_weights_and_originals_are_untouched() -> None:
    model = Net()
    original_a = model.a.weight
    patcher = ModelPatcher(model)
    patcher.add_patches("style", _sets()["style"], 1.0)
    patcher.apply()
    assert model.a.weight is not original_a and torch.equal(patcher.original("a.weight"), original_a)
    x = torch.randn(3, 16).half()
    merged = nn.Linear(16, 24).half()
    merged.weight.data = _reference({"a.weight": original_a}, patcher)["a.weight"]
    merged.bias.data = model.a.bias
    assert torch.equal(model.a(x), merged(x))


def test_unknown_key_and_duplicate_set_are_refused() -> None:
    patcher = ModelPatcher(Net())
    with pytest.raises(KeyError):
        patcher.add_patches("x", {"nope.weight": [KeyPatch(_lora(2, 2, 1, 1))]})
    patcher.add_patches("x", {"a.weight": [KeyPatch(_lora(24, 16, 2, 1))]})
    with pytest.raises(ValueError):
        patcher.add_patches("x", {"a.weight": [KeyPatch(_lora(24, 16, 2, 1))]})


def test_object_patches_are_set_on_apply_and_restored_bit_exact() -> None:
    model = Net()
    original_c = model.c
    replacement = ops.Conv2d(4, 8, 3, padding=1)
    patcher = ModelPatcher(model)
    patcher.add_object_patch("c", replacement)
    assert model.c is original_c  # recording touches nothing
    twin = patcher.clone()
    assert twin.identity() == patcher.identity()
    patcher.apply()
    assert model.c is replacement
    assert twin.apply().recomputed == 0 and model.c is replacement
    patcher.remove_object_patch("c")
    patcher.apply()
    assert model.c is original_c
    patcher.add_object_patch("c", replacement)
    patcher.apply()
    patcher.unpatch()
    assert model.c is original_c
    with pytest.raises(AttributeError):
        patcher.add_object_patch("nope", 1)


def test_patch_function_transforms_the_weight_after_its_patch() -> None:
    model = Net()
    w0 = model.a.weight.clone()
    lora = _lora(24, 16, 4, 1)
    patcher = ModelPatcher(model)
    patcher.add_patches("q", {"a.weight": [KeyPatch(lora, function=lambda w: w.clamp(-0.5, 0.5))]}, 2.0)
    patcher.apply()
    want = (
        (w0.float() + 2.0 * lora.delta(w0.shape, dtype=torch.float32, device=w0.device))
        .clamp(-0.5, 0.5)
        .half()
    )
    assert torch.equal(model.a.weight, want)
    patcher.unpatch()
    assert torch.equal(model.a.weight, w0)
