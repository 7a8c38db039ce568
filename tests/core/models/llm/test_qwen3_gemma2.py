"""Qwen3 (Z-Image's encoder) and Gemma-2 (Lumina 2's) against transformers' Qwen3Model and
Gemma2Model at real width (2 layers, random weights, a small vocabulary): every hidden state to
1e-4 relative in float32, padded batches included."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.models.llm import LlmTextModel
from tests.core.models.llm.reference import hf_config, hf_model, ours_from, real_width, relative_error

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-4


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 512, (2, 19), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[1, 13:] = 0  # the second prompt is padded: its real tokens must not see the padding
    return ids, mask


def _compare(hf: torch.nn.Module, ours: LlmTextModel) -> None:
    ids, mask = _inputs()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        taps = tuple(range(len(ref)))
        out = ours(ids, mask, taps=taps, dtype=torch.float32)
        penultimate = ours(ids, mask, taps=(-2,), dtype=torch.float32)[0]
    for tap, (o, r) in enumerate(zip(out, ref, strict=True)):
        assert relative_error(o[0], r[0]) < TOL, f"hidden state {tap}"
        assert relative_error(o[1, :13], r[1, :13]) < TOL, f"hidden state {tap}, padded prompt"
    assert torch.equal(penultimate, out[-2])  # the stack stops after the deepest tap, same numbers


@pytest.fixture(scope="module")
def qwen3() -> tuple[torch.nn.Module, LlmTextModel]:
    torch.set_grad_enabled(False)
    cfg = real_width("qwen3-4b", 2)
    hf = hf_model("qwen3-4b", hf_config("qwen3-4b", cfg))
    torch.set_grad_enabled(True)
    return hf, ours_from(hf, cfg)


def test_qwen3_4b_matches_transformers(qwen3: tuple[torch.nn.Module, LlmTextModel]) -> None:
    _compare(*qwen3)


def test_qwen3_qk_norm_is_applied(qwen3: tuple[torch.nn.Module, LlmTextModel]) -> None:
    """A changed q_norm weight changes the output (the comparison above cannot pass by accident)."""
    ours = qwen3[1]
    ids, mask = _inputs()
    with torch.no_grad():
        before = ours(ids, mask, taps=(-1,), dtype=torch.float32)[0]
        weight = ours.model.layers[0].self_attn.q_norm.weight
        saved = weight.clone()
        weight.mul_(1.5)
        after = ours(ids, mask, taps=(-1,), dtype=torch.float32)[0]
        weight.copy_(saved)
    assert relative_error(after, before) > 1e-3


@pytest.fixture(scope="module")
def gemma2() -> tuple[torch.nn.Module, LlmTextModel]:
    cfg = real_width("gemma2-2b", 2)
    with torch.no_grad():
        hf = hf_model("gemma2-2b", hf_config("gemma2-2b", cfg), attn="eager")
    return hf, ours_from(hf, cfg)


def _softcap(hf: torch.nn.Module, cap: float | None) -> None:
    for layer in hf.layers:
        layer.self_attn.attn_logit_softcapping = cap


def test_gemma2_2b_as_comfyui_matches_transformers_without_softcap(
    gemma2: tuple[torch.nn.Module, LlmTextModel],
) -> None:
    """The preset (ComfyUI's numbers) has no logit soft-cap: transformers with the cap off."""
    hf, ours = gemma2
    assert ours.config.attn_softcap is None
    _softcap(hf, None)
    _compare(hf, ours)


def test_gemma2_2b_softcap_matches_transformers_eager(gemma2: tuple[torch.nn.Module, LlmTextModel]) -> None:
    """With the cap (transformers' default, eager attention) the hidden states change and match."""
    hf, ours = gemma2
    _softcap(hf, 50.0)
    capped = LlmTextModel(dataclasses.replace(ours.config, attn_softcap=50.0), device="meta")
    capped.load_state_dict(ours.state_dict(), assign=True)
    _compare(hf, capped)
    ids, mask = _inputs()
    with torch.no_grad():
        a = ours(ids, mask, taps=(-1,), dtype=torch.float32)[0]
        b = capped(ids, mask, taps=(-1,), dtype=torch.float32)[0]
    assert relative_error(a, b) > 1e-4  # the cap matters at these logits: ComfyUI's numbers differ


def test_gemma2_sliding_window_matches_transformers(gemma2: tuple[torch.nn.Module, LlmTextModel]) -> None:
    """A window shorter than the prompt (4096 in the real model) on layer 0, as transformers."""
    hf, ours = gemma2
    _softcap(hf, None)
    hf.config.sliding_window = 5
    try:
        windowed = LlmTextModel(dataclasses.replace(ours.config, sliding_window=5), device="meta")
        windowed.load_state_dict(ours.state_dict(), assign=True)
        _compare(hf, windowed)
        ids, mask = _inputs()
        with torch.no_grad():
            plain = ours(ids, mask, taps=(1,), dtype=torch.float32)[0]
            slid = windowed(ids, mask, taps=(1,), dtype=torch.float32)[0]
        assert relative_error(slid, plain) > 1e-4  # the window changed layer 0's output
    finally:
        hf.config.sliding_window = 4096
