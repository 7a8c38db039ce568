"""The adapters against lycoris-lora's own merged weights (an independent implementation).

Each case builds a LyCORIS module on a tiny layer, randomises every factor (several start at
zero), feeds the module's state dict (the file layout) to ``adapter_from_factors`` and compares
``apply`` with the module's ``get_merged_weight`` at strengths 1.0, 0.5 and -1.5.

Known differences, checked separately:
- lycoris-lora 4.1.3 LoHa/LoKr *modules* apply ``alpha / rank`` twice (``get_weight`` scales, then
  ``get_diff_weight`` scales again); module cases use ``alpha == rank`` and the scale is checked
  against lycoris' functional ``diff_weight`` (scaled once, as ComfyUI and A1111 read the files).
- LyCORIS' multiplier for DoRA and for a rescaled OFT/BOFT is not an interpolation (strength 0 would
  not be a no-op); there the comparison is at strength 1 and other strengths are checked to be
  ``W + s * (W1 - W)`` with LyCORIS' own full-strength ``W1``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from core.patching.adapters import adapter_from_factors
from tests.core.patching.util import assert_matches, randomise

lycoris_modules = pytest.importorskip("lycoris.modules")
from lycoris.functional import loha as lycoris_loha  # noqa: E402
from lycoris.functional import lokr as lycoris_lokr  # noqa: E402
from lycoris.modules.boft import ButterflyOFTModule  # noqa: E402
from lycoris.modules.diag_oft import DiagOFTModule  # noqa: E402
from lycoris.modules.glora import GLoRAModule  # noqa: E402
from lycoris.modules.locon import LoConModule  # noqa: E402
from lycoris.modules.loha import LohaModule  # noqa: E402
from lycoris.modules.lokr import LokrModule  # noqa: E402

STRENGTHS = (1.0, 0.5, -1.5)

Factory = Callable[[], nn.Module]


def lin(i: int = 12, o: int = 10) -> nn.Linear:
    return nn.Linear(i, o)


def conv(i: int = 6, o: int = 8, k: int = 3) -> nn.Conv2d:
    return nn.Conv2d(i, o, k)


#: (expected adapter name, LyCORIS module factory) whose multiplier is linear like ours.
LINEAR_CASES: dict[str, tuple[str, Factory]] = {
    "locon-linear": ("lora", lambda: LoConModule("m", lin(), lora_dim=4, alpha=2)),
    "locon-conv": ("locon", lambda: LoConModule("m", conv(), lora_dim=4, alpha=2)),
    "locon-conv-tucker": ("locon", lambda: LoConModule("m", conv(), lora_dim=4, alpha=2, use_tucker=True)),
    "loha-linear": ("loha", lambda: LohaModule("m", lin(), lora_dim=4, alpha=4)),
    "loha-conv": ("loha", lambda: LohaModule("m", conv(), lora_dim=4, alpha=4)),
    "loha-conv-cp": ("loha", lambda: LohaModule("m", conv(), lora_dim=4, alpha=4, use_tucker=True)),
    "lokr-full": ("lokr", lambda: LokrModule("m", lin(16, 12), lora_dim=2, alpha=2, full_matrix=True)),
    "lokr-w2-decomposed": ("lokr", lambda: LokrModule("m", lin(64, 48), lora_dim=2, alpha=2, factor=4)),
    "lokr-both-decomposed": (
        "lokr",
        lambda: LokrModule("m", lin(64, 48), lora_dim=2, alpha=2, factor=8, decompose_both=True),
    ),
    "lokr-conv": ("lokr", lambda: LokrModule("m", conv(32, 48), lora_dim=2, alpha=2, factor=4)),
    "lokr-conv-full": ("lokr", lambda: LokrModule("m", conv(8, 12), lora_dim=8, alpha=8, factor=4)),
    "lokr-conv-tucker": (
        "lokr",
        lambda: LokrModule(
            "m", conv(32, 48), lora_dim=2, alpha=2, factor=8, use_tucker=True, decompose_both=True
        ),
    ),
    "oft-linear": ("oft", lambda: DiagOFTModule("m", lin(10, 12), lora_dim=4)),
    "oft-conv": ("oft", lambda: DiagOFTModule("m", conv(6, 8), lora_dim=4)),
    "oft-constrained": ("oft", lambda: DiagOFTModule("m", lin(10, 12), lora_dim=4, constraint=1e-2)),
    "boft-linear": ("boft", lambda: ButterflyOFTModule("m", lin(10, 32), lora_dim=4)),
    "boft-conv": ("boft", lambda: ButterflyOFTModule("m", conv(6, 16), lora_dim=4)),
    "boft-constrained": ("boft", lambda: ButterflyOFTModule("m", lin(10, 32), lora_dim=4, constraint=1e-2)),
    "glora-linear": ("glora", lambda: GLoRAModule("m", lin(10, 12), lora_dim=3, alpha=2)),
    "glora-conv": ("glora", lambda: GLoRAModule("m", conv(6, 8), lora_dim=3, alpha=2)),
}

#: Cases compared at strength 1 (LyCORIS' multiplier differs elsewhere, see the module docstring).
FULL_STRENGTH_CASES: dict[str, tuple[str, Factory]] = {
    "dora-locon-linear-out": (
        "lora",
        lambda: LoConModule("m", lin(), lora_dim=4, alpha=2, weight_decompose=True),
    ),
    "dora-locon-linear-in": (
        "lora",
        lambda: LoConModule("m", lin(), lora_dim=4, alpha=2, weight_decompose=True, wd_on_out=False),
    ),
    "dora-locon-conv-out": (
        "locon",
        lambda: LoConModule("m", conv(), lora_dim=4, alpha=2, weight_decompose=True),
    ),
    "dora-locon-conv-in": (
        "locon",
        lambda: LoConModule("m", conv(), lora_dim=4, alpha=2, weight_decompose=True, wd_on_out=False),
    ),
    "dora-loha": ("loha", lambda: LohaModule("m", lin(), lora_dim=4, alpha=4, weight_decompose=True)),
    "dora-loha-in": (
        "loha",
        lambda: LohaModule("m", conv(), lora_dim=4, alpha=4, weight_decompose=True, wd_on_out=False),
    ),
    "dora-lokr": (
        "lokr",
        lambda: LokrModule("m", lin(64, 48), lora_dim=2, alpha=2, factor=4, weight_decompose=True),
    ),
    "oft-rescaled": ("oft", lambda: DiagOFTModule("m", lin(10, 12), lora_dim=4, rescaled=True)),
    "boft-rescaled": ("boft", lambda: ButterflyOFTModule("m", conv(6, 16), lora_dim=4, rescaled=True)),
}


def _build(factory: Factory) -> tuple[nn.Module, torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    module = factory()
    oft = isinstance(module, DiagOFTModule | ButterflyOFTModule)
    randomise(module, std=0.3 if oft else 1.0)
    weight = module.org_weight.detach().clone()
    factors = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return module, weight, factors


def _merged(module: nn.Module, strength: float) -> torch.Tensor:
    with torch.no_grad():
        return module.get_merged_weight(multiplier=strength, shape=module.org_weight.shape)[0].detach()


@pytest.mark.parametrize("case", sorted(LINEAR_CASES))
def test_matches_lycoris_merged_weight(case: str) -> None:
    expected_name, factory = LINEAR_CASES[case]
    module, weight, factors = _build(factory)
    adapter = adapter_from_factors(factors, module=case)
    assert adapter.name == expected_name
    for strength in STRENGTHS:
        ours = adapter.apply(weight, strength)
        assert_matches(f"{case} @ {strength}", ours, _merged(module, strength), weight)


@pytest.mark.parametrize("case", sorted(FULL_STRENGTH_CASES))
def test_matches_lycoris_at_full_strength(case: str) -> None:
    expected_name, factory = FULL_STRENGTH_CASES[case]
    module, weight, factors = _build(factory)
    adapter = adapter_from_factors(factors, module=case)
    assert adapter.name == expected_name
    full = _merged(module, 1.0)
    assert_matches(f"{case} @ 1.0", adapter.apply(weight, 1.0), full, weight)
    for strength in STRENGTHS[1:]:
        if isinstance(module, ButterflyOFTModule):
            expected = _boft_interpolated(module, strength)
        else:
            expected = weight + strength * (full - weight)
        assert_matches(
            f"{case} @ {strength} (interpolated)", adapter.apply(weight, strength), expected, weight
        )


def _boft_interpolated(module: ButterflyOFTModule, strength: float) -> torch.Tensor:
    """LyCORIS' per-stage interpolation without rescale, then ``1 + s * (rescale - 1)`` on the rows."""
    rescale = module.rescale.detach().clone()
    with torch.no_grad():
        module.rescale.fill_(1.0)
        rotated = _merged(module, strength)
        module.rescale.copy_(rescale)
    return rotated * (1 + strength * (rescale - 1)).reshape(-1, *([1] * (rotated.ndim - 1)))


def test_constraint_is_active_in_the_constrained_cases() -> None:
    """The constrained OFT case really clamps Q (else it would test nothing new)."""
    _, _, factors = _build(LINEAR_CASES["oft-constrained"][1])
    blocks = factors["oft_blocks"]
    q = blocks - blocks.transpose(-1, -2)
    assert float(q.norm()) > float(factors["alpha"]) * 12


def test_loha_alpha_scale_matches_lycoris_functional() -> None:
    """``alpha / rank`` applied once, as lycoris' functional rebuild (gamma) and ComfyUI do."""
    torch.manual_seed(1)
    rank, alpha = 4, 3.0
    w1a, w1b, w2a, w2b = (
        torch.randn(10, rank),
        torch.randn(rank, 12),
        torch.randn(10, rank),
        torch.randn(rank, 12),
    )
    weight = torch.randn(10, 12)
    factors = {"hada_w1_a": w1a, "hada_w1_b": w1b, "hada_w2_a": w2a, "hada_w2_b": w2b}
    adapter = adapter_from_factors(factors, alpha)
    ref_delta = lycoris_loha.diff_weight(w1b, w1a, w2b, w2a, None, None, gamma=alpha / rank)
    for strength in STRENGTHS:
        assert_matches(
            f"loha alpha @ {strength}", adapter.apply(weight, strength), weight + strength * ref_delta, weight
        )


@pytest.mark.parametrize("both", [False, True])
def test_lokr_alpha_scale_matches_lycoris_functional(both: bool) -> None:
    torch.manual_seed(2)
    rank, alpha = 2, 5.0
    w1 = None if both else torch.randn(4, 4)
    w1a, w1b = (torch.randn(4, rank), torch.randn(rank, 4)) if both else (None, None)
    w2a, w2b = torch.randn(12, rank), torch.randn(rank, 16)
    weight = torch.randn(48, 64)
    parts = {"lokr_w1": w1, "lokr_w1_a": w1a, "lokr_w1_b": w1b, "lokr_w2_a": w2a, "lokr_w2_b": w2b}
    adapter = adapter_from_factors({k: v for k, v in parts.items() if v is not None}, alpha)
    ref_delta = lycoris_lokr.diff_weight(w1, w1a, w1b, None, w2a, w2b, None, gamma=alpha)
    for strength in STRENGTHS:
        assert_matches(
            f"lokr alpha @ {strength}", adapter.apply(weight, strength), weight + strength * ref_delta, weight
        )


def test_lycoris_loha_module_scales_twice() -> None:
    """Documents the lycoris-lora 4.1.3 quirk the module cases avoid with alpha == rank."""
    torch.manual_seed(3)
    module = LohaModule("m", lin(), lora_dim=4, alpha=2)
    randomise(module)
    weight = module.org_weight.detach().clone()
    adapter = adapter_from_factors(dict(module.state_dict()))
    once = adapter.apply(weight, 1.0)
    with torch.no_grad():
        twice = weight + 0.5 * (once - weight)  # (alpha / rank) ** 2 == 0.25 == 0.5 * 0.5
    assert_matches("lycoris loha double scale", twice, _merged(module, 1.0), weight)
