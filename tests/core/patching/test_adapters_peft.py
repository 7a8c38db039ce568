"""LoRA and DoRA against PEFT's ``merge_and_unload`` (an independent implementation).

PEFT is the reference for the DoRA norm axis: one norm per *output* channel, over all other dims,
for linear and conv layers alike (its conv magnitude is stored as ``(1, out, 1, 1)``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.errors import ModelMismatchError
from core.patching.adapters import LoRAAdapter, adapter_from_factors
from tests.core.patching.util import assert_matches

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict  # noqa: E402

RANK, ALPHA = 4, 6


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(12, 10)
        self.conv = nn.Conv2d(6, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - never called
        return x


def _peft_model(use_dora: bool) -> nn.Module:
    torch.manual_seed(0)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["lin", "conv"], use_dora=use_dora)
    model = get_peft_model(Net(), config)
    # lora_B starts at zero and the magnitude at the weight norm: randomise every adapter parameter.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_magnitude_vector" in name:
                param.copy_(torch.rand_like(param) + 0.5)
            elif "lora_" in name:
                param.normal_()
    return model


def _factors(model: nn.Module, layer: str) -> dict[str, torch.Tensor]:
    prefix = f"base_model.model.{layer}."
    state = get_peft_model_state_dict(model)
    return {k.removeprefix(prefix): v.detach().clone() for k, v in state.items() if k.startswith(prefix)}


def _base_weight(model: nn.Module, layer: str) -> torch.Tensor:
    return getattr(model.base_model.model, layer).base_layer.weight.detach().clone()


@pytest.mark.parametrize("layer", ["lin", "conv"])
@pytest.mark.parametrize("strength", [1.0, 0.5, -1.5])
def test_lora_matches_peft_merge(layer: str, strength: float) -> None:
    model = _peft_model(use_dora=False)
    weight, factors = _base_weight(model, layer), _factors(model, layer)
    assert set(factors) == {"lora_A.weight", "lora_B.weight"}
    adapter = adapter_from_factors(factors, ALPHA, module=layer)
    assert adapter.name == ("lora" if layer == "lin" else "locon")
    # PEFT's own strength: scale_layer multiplies its alpha / r scaling.
    getattr(model.base_model.model, layer).scale_layer(strength)
    ref = getattr(model.merge_and_unload(), layer).weight.detach()
    assert_matches(f"peft lora {layer} @ {strength}", adapter.apply(weight, strength), ref, weight)


@pytest.mark.parametrize("layer", ["lin", "conv"])
def test_dora_matches_peft_merge(layer: str) -> None:
    model = _peft_model(use_dora=True)
    weight, factors = _base_weight(model, layer), _factors(model, layer)
    assert set(factors) == {"lora_A.weight", "lora_B.weight", "lora_magnitude_vector"}
    adapter = adapter_from_factors(factors, ALPHA, module=layer)
    ref = getattr(model.merge_and_unload(), layer).weight.detach()
    assert_matches(f"peft dora {layer} @ 1.0", adapter.apply(weight, 1.0), ref, weight)
    for strength in (0.5, -1.5):
        expected = weight + strength * (ref - weight)
        assert_matches(f"peft dora {layer} @ {strength}", adapter.apply(weight, strength), expected, weight)


def test_dora_on_the_input_axis_would_not_match_peft() -> None:
    """The axis matters: normalising per input channel gives a different weight than PEFT's."""
    model = _peft_model(use_dora=True)
    weight, factors = _base_weight(model, "lin"), _factors(model, "lin")
    ref = model.merge_and_unload().lin.weight.detach()
    wrong = LoRAAdapter(
        factors["lora_B.weight"],
        factors["lora_A.weight"],
        alpha=ALPHA,
        dora_scale=torch.rand(1, 12) + 0.5,
        dora_axis="in",
    ).apply(weight, 1.0)
    assert (wrong - ref).norm() > 1e-2 * (ref - weight).norm()


def test_peft_conv_magnitude_needs_the_out_axis() -> None:
    """A raw ``(1, out, 1, 1)`` magnitude reads as per-input; the PEFT key (or dora_axis) fixes it."""
    model = _peft_model(use_dora=True)
    weight, factors = _base_weight(model, "conv"), _factors(model, "conv")
    magnitude = factors.pop("lora_magnitude_vector")
    assert magnitude.shape == (1, 8, 1, 1)
    guessed = adapter_from_factors(factors, ALPHA, dora_scale=magnitude, module="conv")
    with pytest.raises(ModelMismatchError) as info:
        guessed.apply(weight, 1.0)
    assert info.value.code == "shape_mismatch" and "dora_axis='out'" in str(info.value)
    explicit = adapter_from_factors(factors, ALPHA, dora_scale=magnitude, dora_axis="out", module="conv")
    ref = model.merge_and_unload().conv.weight.detach()
    assert_matches("peft dora conv, explicit axis", explicit.apply(weight, 1.0), ref, weight)
