"""The decoder-LLM encoders' activation model (core/archs/llm/memory.py) against the tracker's
measurement: exact on small shapes in both regimes, within 15 % at Qwen3-4B's and Gemma-2-2B's
real widths (one layer, a small vocabulary) with one and two rows (a weighted prompt runs two)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.archs.llm.memory import activation_bytes
from core.memory.tracking import ActivationTracker
from core.models.llm import LlmConfig
from tests.fixtures.llm_files import model_from, random_state

pytestmark = pytest.mark.usefixtures("one_thread")


def _measure(cfg: LlmConfig, tokens: int, batch: int) -> int:
    model = model_from(cfg, random_state(cfg))
    ids = torch.randint(0, cfg.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(batch, tokens, dtype=torch.long)
    with torch.inference_mode(), ActivationTracker([ids, mask]) as tracker:
        model(ids, mask, taps=(-1,), dtype=torch.float32)
    return int(tracker.peak_bytes)


@pytest.mark.parametrize("family", ["qwen3-4b", "gemma2-2b"])
@pytest.mark.parametrize("ffn, heads", [(512, 2), (16, 8)])  # the MLP's peak, then the attention's
@pytest.mark.parametrize("batch", [1, 2])  # two rows share one set of RoPE tables
def test_exact_on_small_shapes(family: str, ffn: int, heads: int, batch: int) -> None:
    cfg = dataclasses.replace(
        LlmConfig.preset(family),
        vocab_size=512,
        hidden_size=64,
        intermediate_size=ffn,
        num_layers=2,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=16,
    )
    assert _measure(cfg, 64, batch) == pytest.approx(activation_bytes(cfg, 64, batch), rel=0.002)


@pytest.mark.parametrize("family", ["qwen3-4b", "gemma2-2b"])
def test_within_15_percent_at_real_width(family: str) -> None:
    cfg = dataclasses.replace(LlmConfig.preset(family), vocab_size=512, num_layers=1)
    for batch in (1, 2):
        measured, predicted = _measure(cfg, 120, batch), activation_bytes(cfg, 120, batch)
        assert abs(predicted - measured) <= 0.15 * measured, (batch, measured, predicted)
