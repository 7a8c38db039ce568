"""Behaviour every adapter shares (strength 0, purity, dtypes, caching), the registry, and refusals.

Hand-checked formulas are in ``test_adapter_formulas.py``; PEFT and lycoris-lora comparisons in
``test_adapters_peft.py`` and ``test_adapters_lycoris.py``.
"""

from __future__ import annotations

import pytest
import torch

from core.errors import LoadoutError, ModelMismatchError
from core.patching.adapters import (
    Adapter,
    AdapterFormatError,
    AdapterRegistry,
    DiffAdapter,
    GLoRAAdapter,
    LoHaAdapter,
    LoRAAdapter,
    NonFiniteAdapterError,
    OFTAdapter,
    adapter_from_factors,
    registry,
)
from tests.core.patching.util import CASES, assert_matches, case, cases, rand

ALL_NAMES = {"lora", "locon", "loha", "lokr", "glora", "oft", "boft", "diff", "set"}


# -- registry --------------------------------------------------------------------------------


def test_registry_holds_every_algorithm_once() -> None:
    assert set(registry.names()) == ALL_NAMES
    assert len(registry) == len(ALL_NAMES)
    assert {a.name for a, _ in cases().values()} == ALL_NAMES


def test_registry_rejects_duplicate_names() -> None:
    fresh = AdapterRegistry()
    fresh.register(LoRAAdapter)
    with pytest.raises(ValueError, match="already registered"):
        fresh.register(LoRAAdapter)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(LoHaAdapter)
    assert registry.get("loha") is LoHaAdapter and len(registry) == len(ALL_NAMES)


# -- properties shared by every adapter ------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_strength_zero_returns_the_weight_unchanged(name: str) -> None:
    adapter, weight = case(name)
    out = adapter.apply(weight, 0.0)
    assert torch.equal(out, weight) and out is not weight


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("strength", [1.0, -1.5])
def test_input_weight_is_never_mutated(name: str, strength: float) -> None:
    adapter, weight = case(name)
    before = weight.clone()
    out = adapter.apply(weight, strength)
    assert torch.equal(weight, before)
    assert not torch.equal(out, weight)


@pytest.mark.parametrize("name", CASES)
def test_linear_in_strength(name: str) -> None:
    adapter, weight = case(name)
    at_one = adapter.difference(weight, 1.0)
    for strength in (0.5, -1.5, 7.0):
        scaled = adapter.difference(weight, strength)
        if adapter.linear_in_strength:
            assert_matches(f"{name} linear @ {strength}", weight + scaled, weight + strength * at_one, weight)
        else:
            assert (scaled - strength * at_one).norm() > 1e-3 * scaled.norm()
    assert adapter.linear_in_strength == (name != "boft")


@pytest.mark.parametrize("name", CASES)
def test_cached_delta_reapplies_on_a_strength_change(name: str) -> None:
    adapter, weight = case(name)
    assert adapter.is_additive == (name in {"lora", "locon", "loha", "lokr", "diff"})
    if name in {"oft", "boft", "glora", "set"}:
        with pytest.raises(TypeError):
            adapter.delta(weight.shape, dtype=torch.float32, device=weight.device)
        return
    delta = adapter.delta(weight.shape, dtype=torch.float32, device=weight.device)
    assert delta.shape == weight.shape
    if adapter.is_additive:
        for strength in (1.0, 0.3, -2.0):
            assert_matches(
                f"{name} cached", weight + strength * delta, adapter.apply(weight, strength), weight
            )


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_weight_in_half_weight_out_computed_in_float32(name: str, dtype: torch.dtype) -> None:
    adapter, weight = case(name)
    low = weight.to(dtype)
    out = adapter.apply(low, 0.7)
    assert out.dtype == dtype and out.shape == low.shape
    work = low.float()
    assert torch.equal(out, (work + adapter.difference(work, 0.7)).to(dtype))


def test_half_factors_are_upcast_before_the_product() -> None:
    up, down, weight = rand(10, 4).half(), rand(4, 12).half(), rand(10, 12).half()
    out = LoRAAdapter(up, down, alpha=3.0).apply(weight, 1.0)
    expected = (weight.float() + 0.75 * (up.float() @ down.float())).half()
    assert out.dtype == torch.float16 and torch.equal(out, expected)


def test_intermediate_dtype_float64() -> None:
    up, down, weight = rand(10, 4), rand(4, 12), rand(10, 12)
    out = LoRAAdapter(up, down, alpha=2.0).apply(weight, 1.3, intermediate_dtype=torch.float64)
    expected = (weight.double() + 1.3 * 0.5 * (up.double() @ down.double())).float()
    assert out.dtype == torch.float32 and torch.equal(out, expected)


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "factors",
    [
        {"lora_up.weight": (10, 4), "lora_down.weight": (4, 12)},
        {"hada_w1_a": (10, 4), "hada_w1_b": (4, 12), "hada_w2_a": (10, 4), "hada_w2_b": (4, 12)},
        {"lokr_w1": (2, 3), "lokr_w2_a": (5, 2), "lokr_w2_b": (2, 4)},
        {"oft_blocks": (5, 2, 2)},
        {"diff": (10, 12)},
        {"lora_up.weight": (10, 4), "lora_down.weight": (4, 12), "dora_scale": (10, 1)},
    ],
    ids=["lora", "loha", "lokr", "oft", "diff", "dora"],
)
def test_non_finite_factors_are_refused(factors: dict[str, tuple[int, ...]], bad: float) -> None:
    for poisoned in factors:
        tensors = {k: rand(*s) for k, s in factors.items()}
        tensors[poisoned].view(-1)[3] = bad
        with pytest.raises(NonFiniteAdapterError) as info:
            adapter_from_factors(tensors, module="unet.mid.attn1.to_q")
        assert info.value.code == "nonfinite_adapter"
        assert "unet.mid.attn1.to_q" in str(info.value)
        assert isinstance(info.value, LoadoutError)


def test_non_finite_alpha_is_refused() -> None:
    with pytest.raises(NonFiniteAdapterError):
        adapter_from_factors(
            {
                "lora_up.weight": rand(10, 4),
                "lora_down.weight": rand(4, 12),
                "alpha": torch.tensor(float("nan")),
            }
        )


@pytest.mark.parametrize(
    ("adapter", "shape"),
    [
        (LoRAAdapter(rand(10, 4), rand(4, 12)), (10, 13)),
        (LoRAAdapter(rand(10, 4), rand(4, 12)), (11, 12)),
        (LoHaAdapter(rand(10, 4), rand(4, 12), rand(10, 4), rand(4, 12)), (12, 10)),
        (OFTAdapter(rand(5, 2, 2)), (12, 10)),
        (GLoRAAdapter(rand(12, 3), rand(3, 12), rand(10, 3), rand(3, 12)), (10, 6, 2)),
        (DiffAdapter(rand(10, 12)), (10, 6, 2, 2)),
        (LoRAAdapter(rand(10, 4), rand(4, 12), dora_scale=rand(9, 1)), (10, 12)),
    ],
    ids=["lora-in", "lora-out", "loha", "oft", "glora", "diff", "dora-magnitude"],
)
def test_shape_mismatch_names_both_shapes(adapter: Adapter, shape: tuple[int, ...]) -> None:
    with pytest.raises(ModelMismatchError) as info:
        adapter.apply(rand(*shape), 1.0)
    assert info.value.code == "shape_mismatch"
    assert str(list(shape)) in str(info.value)
    assert info.value.to_json()["code"] == "shape_mismatch"


@pytest.mark.parametrize(
    ("factors", "code"),
    [
        ({"lora_up.weight": (10, 4), "hada_w1_a": (10, 4)}, "unsupported_adapter"),
        (
            {"lora_up.weight": (10, 4), "lora_down.weight": (4, 12), "lora_up.bias": (10,)},
            "unsupported_adapter",
        ),
        ({"lora_up.weight": (10, 4)}, "invalid_adapter"),
        (
            {"lora_up.weight": (10, 4), "lora_B.weight": (10, 4), "lora_down.weight": (4, 12)},
            "invalid_adapter",
        ),
        ({"lora_up.weight": (10, 3), "lora_down.weight": (4, 12)}, "invalid_adapter"),
        (
            {"hada_w1_a": (10, 4), "hada_w1_b": (4, 12), "hada_w2_a": (10, 4), "hada_w2_b": (4, 11)},
            "invalid_adapter",
        ),
        ({"lokr_w1": (2, 3)}, "invalid_adapter"),
        ({"oft_blocks": (5, 2, 3)}, "invalid_adapter"),
        ({"oft_blocks": (5, 2, 2), "dora_scale": (10, 1)}, "invalid_adapter"),
        ({"alpha": ()}, "invalid_adapter"),
    ],
    ids=[
        "mixed",
        "unknown",
        "missing",
        "duplicate",
        "rank",
        "loha-halves",
        "lokr-side",
        "oft-square",
        "oft-dora",
        "empty",
    ],
)
def test_bad_factors_are_refused(factors: dict[str, tuple[int, ...]], code: str) -> None:
    with pytest.raises(AdapterFormatError) as info:
        adapter_from_factors({k: rand(*s) for k, s in factors.items()}, module="te1.layer0")
    assert info.value.code == code


def test_adapters_build_on_meta_tensors() -> None:
    meta = LoRAAdapter(torch.empty(10, 4, device="meta"), torch.empty(4, 12, device="meta"))
    assert meta.target_shape() == (10, 12)
    meta.check((10, 12))
