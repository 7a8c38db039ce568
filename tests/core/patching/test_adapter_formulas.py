"""The formulas no third-party reference covers, checked by hand; slices of fused weights; stacking."""

from __future__ import annotations

import pytest
import torch

from core.errors import ModelMismatchError
from core.patching.adapters import (
    BOFTAdapter,
    LoRAAdapter,
    OFTAdapter,
    Patch,
    adapter_from_factors,
    apply_patches,
    apply_to_slice,
    module_adapters,
)
from tests.core.patching.util import assert_matches, cases, rand

# -- formulas by hand ------------------------------------------------------------------------


NAMING_SCHEMES = {
    "kohya": ("lora_up.weight", "lora_down.weight"),
    "peft": ("lora_B.weight", "lora_A.weight"),
    "diffusers": ("lora.up.weight", "lora.down.weight"),
    "diffusers-old": ("lora_linear_layer.up.weight", "lora_linear_layer.down.weight"),
    "underscore": ("_lora.up.weight", "_lora.down.weight"),
}


@pytest.mark.parametrize("scheme", sorted(NAMING_SCHEMES))
def test_lora_formula_under_every_naming(scheme: str) -> None:
    up_key, down_key = NAMING_SCHEMES[scheme]
    up, down, weight = rand(10, 4), rand(4, 12), rand(10, 12)
    adapter = adapter_from_factors({up_key: up, down_key: down, "alpha": torch.tensor(3.0)})
    assert adapter.name == "lora"
    for strength in (1.0, 0.5, -1.5, 7.0):
        expected = weight + strength * (3.0 / 4) * (up @ down)
        assert_matches(f"lora {scheme} @ {strength}", adapter.apply(weight, strength), expected, weight)


def test_lora_alpha_rules() -> None:
    up, down, weight = rand(10, 4), rand(4, 12), rand(10, 12)
    no_alpha = adapter_from_factors({"lora_up.weight": up, "lora_down.weight": down})
    assert_matches("no alpha", no_alpha.apply(weight, 1.0), weight + up @ down, weight)
    explicit = adapter_from_factors(
        {"lora_up.weight": up, "lora_down.weight": down, "alpha": torch.tensor(8.0)}, 2.0
    )
    assert_matches("explicit alpha wins", explicit.apply(weight, 1.0), weight + 0.5 * (up @ down), weight)
    zero = LoRAAdapter(up, down, alpha=0.0)
    assert torch.equal(zero.apply(weight, 1.0), weight)  # ComfyUI and A1111 scale by alpha / rank = 0


def test_linear_lora_patches_a_1x1_conv() -> None:
    up, down, weight = rand(10, 4), rand(4, 12), rand(10, 12, 1, 1)
    out = LoRAAdapter(up, down).apply(weight, 1.0)
    assert_matches("lora on 1x1 conv", out, weight + (up @ down)[:, :, None, None], weight)


def test_locon_formulas() -> None:
    up, down, weight = rand(8, 4, 1, 1), rand(4, 6, 3, 3), rand(8, 6, 3, 3)
    plain = adapter_from_factors({"lora_up.weight": up, "lora_down.weight": down}, 2.0)
    expected = weight + 0.5 * torch.einsum("oi,ichw->ochw", up[:, :, 0, 0], down)
    assert plain.name == "locon"
    assert_matches("locon", plain.apply(weight, 1.0), expected, weight)
    mid, down1 = rand(4, 4, 3, 3), rand(4, 6, 1, 1)
    tucker = adapter_from_factors(
        {"lora_up.weight": up, "lora_mid.weight": mid, "lora_down.weight": down1}, 2.0
    )
    expected = weight - 1.5 * 0.5 * torch.einsum("oi,ijhw,jc->ochw", up[:, :, 0, 0], mid, down1[:, :, 0, 0])
    assert_matches("locon tucker", tucker.apply(weight, -1.5), expected, weight)


def test_loha_formula() -> None:
    w1a, w1b, w2a, w2b, weight = (
        rand(10, 4),
        rand(4, 12),
        rand(10, 4, seed=1),
        rand(4, 12, seed=1),
        rand(10, 12),
    )
    adapter = adapter_from_factors(
        {"hada_w1_a": w1a, "hada_w1_b": w1b, "hada_w2_a": w2a, "hada_w2_b": w2b}, 2.0
    )
    expected = weight + 0.8 * 0.5 * (w1a @ w1b) * (w2a @ w2b)
    assert_matches("loha", adapter.apply(weight, 0.8), expected, weight)


def test_lokr_formula_by_blocks() -> None:
    w1, w2a, w2b, weight = rand(2, 3), rand(5, 2), rand(2, 4), rand(10, 12)
    adapter = adapter_from_factors({"lokr_w1": w1, "lokr_w2_a": w2a, "lokr_w2_b": w2b}, 1.0)
    w2 = w2a @ w2b
    expected = weight.clone()
    for i in range(2):
        for j in range(3):
            expected[i * 5 : (i + 1) * 5, j * 4 : (j + 1) * 4] += 0.5 * w1[i, j] * w2
    assert_matches("lokr blocks", adapter.apply(weight, 1.0), expected, weight)
    full = adapter_from_factors({"lokr_w1": w1, "lokr_w2": w2}, 1.0)  # two full factors: never scaled
    assert_matches("lokr full", full.apply(weight, 1.0), weight + torch.kron(w1, w2), weight)


def test_glora_formula_both_layouts() -> None:
    a1, a2, b1, b2, weight = rand(12, 3), rand(3, 12), rand(10, 3), rand(3, 12, seed=1), rand(10, 12)
    expected = weight + 0.5 * (2.0 / 3) * (weight @ a1 @ a2 + b1 @ b2)
    current = adapter_from_factors({"a1.weight": a1, "a2.weight": a2, "b1.weight": b1, "b2.weight": b2}, 2.0)
    assert_matches("glora", current.apply(weight, 0.5), expected, weight)
    # the older layout: a1 [r, in], a2 [in, r], b1 [r, in], b2 [out, r], dW = W a2 a1 + b2 b1
    old = adapter_from_factors({"a1.weight": a2, "a2.weight": a1, "b1.weight": b2, "b2.weight": b1}, 2.0)
    assert_matches("glora old layout", old.apply(weight, 0.5), expected, weight)


def test_oft_formula_with_an_explicit_inverse() -> None:
    blocks, weight = 0.3 * rand(5, 2, 2), rand(10, 12)
    q = (blocks - blocks.transpose(1, 2)).double()
    eye = torch.eye(2, dtype=torch.float64)
    rotations = [(eye + qi) @ torch.linalg.inv(eye - qi) for qi in q]
    rotated = (torch.block_diag(*rotations).T @ weight.double()).float()
    adapter = OFTAdapter(blocks)
    for strength in (1.0, 0.5, -1.5):
        assert_matches(
            f"oft @ {strength}",
            adapter.apply(weight, strength),
            weight + strength * (rotated - weight),
            weight,
        )
    assert torch.allclose(
        torch.block_diag(*rotations) @ torch.block_diag(*rotations).T, torch.eye(10).double()
    )


def test_boft_single_stage_is_a_permuted_block_rotation() -> None:
    blocks, weight = 0.3 * rand(1, 3, 4, 4), rand(12, 5)
    perm = [g * 4 + half * 2 + t for g in range(3) for t in range(2) for half in range(2)]
    q = (blocks[0] - blocks[0].transpose(1, 2)).double()
    eye = torch.eye(4, dtype=torch.float64)
    rotation = torch.block_diag(*[(eye + qi) @ torch.linalg.inv(eye - qi) for qi in q])
    permute = torch.eye(12, dtype=torch.float64)[perm]
    expected = (permute.T @ rotation @ permute @ weight.double()).float()
    assert_matches("boft one stage", BOFTAdapter(blocks).apply(weight, 1.0), expected, weight)


def test_dora_per_input_channel_as_kohya_writes_it() -> None:
    up, down, weight, magnitude = rand(10, 4), rand(4, 12), rand(10, 12), rand(1, 12).abs() + 0.5
    adapter = adapter_from_factors(
        {"lora_up.weight": up, "lora_down.weight": down, "dora_scale": magnitude}, 2.0
    )
    merged = weight + 0.5 * (up @ down)
    full = magnitude * merged / merged.norm(dim=0, keepdim=True)
    for strength in (1.0, -1.5):
        assert_matches(
            f"dora in @ {strength}",
            adapter.apply(weight, strength),
            weight + strength * (full - weight),
            weight,
        )


def test_dora_per_output_channel_from_a_flat_magnitude() -> None:
    up, down, weight, magnitude = rand(10, 4), rand(4, 12), rand(10, 12), rand(10).abs() + 0.5
    merged = weight + up @ down
    full = magnitude[:, None] * merged / merged.norm(dim=1, keepdim=True)
    out = LoRAAdapter(up, down, dora_scale=magnitude).apply(weight, 1.0)
    assert_matches("dora out", out, full, weight)


def test_diff_set_and_bias() -> None:
    weight, bias, diff, diff_b, target = (
        rand(10, 12),
        rand(10),
        rand(10, 12, seed=1),
        rand(10, seed=1),
        rand(10, 12, seed=2),
    )
    both = module_adapters({"diff": diff, "diff_b": diff_b})
    assert both.weight is not None and both.bias is not None and both.weight.name == "diff"
    assert_matches("diff", both.weight.apply(weight, -1.5), weight - 1.5 * diff, weight)
    assert_matches("diff_b", both.bias.apply(bias, 0.5), bias + 0.5 * diff_b, bias)
    only_bias = module_adapters({"diff_b": diff_b})
    assert only_bias.weight is None and only_bias.bias is not None
    replace = adapter_from_factors({"set_weight": target})
    assert replace.name == "set" and torch.equal(replace.apply(weight, 1.0), target)
    assert_matches("set @ 0.5", replace.apply(weight, 0.5), weight + 0.5 * (target - weight), weight)


# -- slices and stacking ---------------------------------------------------------------------


def test_fused_qkv_receives_q_k_v_loras_on_slices() -> None:
    d, weight = 6, rand(18, 8)
    loras = [LoRAAdapter(rand(d, 2, seed=i), rand(2, 8, seed=i), alpha=1.0) for i in range(3)]
    out = weight
    for i, lora in enumerate(loras):
        out = apply_to_slice(out, lora, 0.8, (0, i * d, d))
    expected = torch.cat(
        [weight[i * d : (i + 1) * d] + 0.8 * 0.5 * (lo.up @ lo.down) for i, lo in enumerate(loras)]
    )
    assert_matches("qkv slices", out, expected, weight)
    at_once = apply_patches(weight, [Patch(lo, 0.8, (0, i * d, d)) for i, lo in enumerate(loras)])
    assert_matches("qkv in one pass", at_once, expected, weight)
    partial = apply_to_slice(weight, loras[1], 1.0, (0, d, d))
    assert torch.equal(partial[:d], weight[:d]) and torch.equal(partial[2 * d :], weight[2 * d :])


def test_slice_on_the_input_dim_and_dora_on_a_slice() -> None:
    weight, up, down, magnitude = rand(10, 20), rand(10, 3), rand(3, 8), rand(10, 1).abs() + 0.5
    dora = LoRAAdapter(up, down, dora_scale=magnitude)
    out = apply_to_slice(weight, dora, 1.0, (1, 4, 8))
    expected = weight.clone()
    expected[:, 4:12] = dora.apply(weight[:, 4:12], 1.0)
    assert torch.equal(out, expected)
    assert torch.equal(out[:, :4], weight[:, :4]) and torch.equal(out[:, 12:], weight[:, 12:])


def test_slice_outside_the_weight_is_refused() -> None:
    with pytest.raises(ModelMismatchError) as info:
        apply_to_slice(rand(18, 8), LoRAAdapter(rand(6, 2), rand(2, 8)), 1.0, (0, 15, 6))
    assert info.value.code == "shape_mismatch"


def test_stacking_is_sequential_application() -> None:
    weight = rand(10, 12)
    lora, _ = cases()["lora"]
    oft, _ = cases()["oft"]
    first = oft.apply(lora.apply(weight, 0.7), -1.2)
    assert_matches("stack", apply_patches(weight, [Patch(lora, 0.7), Patch(oft, -1.2)]), first, weight)
    other_order = lora.apply(oft.apply(weight, -1.2), 0.7)
    assert (other_order - first).norm() > 1e-3 * (first - weight).norm()  # order matters, and is kept
    d1 = lora.delta(weight.shape, dtype=torch.float32, device=weight.device)
    loha, _ = cases()["loha"]
    d2 = loha.delta(weight.shape, dtype=torch.float32, device=weight.device)
    assert_matches(
        "two additive", loha.apply(lora.apply(weight, 0.7), -2.0), weight + 0.7 * d1 - 2.0 * d2, weight
    )
