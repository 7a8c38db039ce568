"""A decoder-LLM encoder is a model like any other for the manager: on a card too small for it,
it is placed partly and the rest streams with the same bits; a bigger model placed after it
evicts it; placed again, it gives the same hidden states."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.archs.llm.memory import activation_bytes
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.models.llm import LlmConfig, LlmTextModel
from core.session import Placement, PlacementConfig
from core.text.llm import Z_IMAGE_QWEN3, LlmTower, qwen_tokenizer
from tests.fixtures.llm_files import model_from, random_state

pytestmark = pytest.mark.usefixtures("one_thread")


def _encoder(seed: int = 0) -> LlmTextModel:
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen3-4b"),
        vocab_size=151936,  # the template's ids are Qwen's own
        hidden_size=64,
        intermediate_size=256,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
    )
    return model_from(cfg, {k: v.to(torch.bfloat16) for k, v in random_state(cfg, seed).items()})


def _card(limit: int) -> Placement:
    settings = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0)
    return Placement(cpu_device(0), PlacementConfig(settings, limit, 1 << 16), cpu_is_device=True)


def _encode(model: LlmTextModel, placement: Placement | None) -> torch.Tensor:
    if placement is not None:
        placement.register(model, "qwen3-4b", family="qwen3-4b")
        result = placement.place([model], activation_bytes(model.config, 32))
        assert not result.refused, result.refused
    tower = LlmTower(model, qwen_tokenizer(), Z_IMAGE_QWEN3, device=torch.device("cpu"))
    return tower.encode("a cat in the rain").hidden


def test_streamed_encoder_gives_the_same_bits_and_is_evicted_for_a_bigger_model() -> None:
    reference = _encode(_encoder(), None)
    model = _encoder()
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    placement = _card(size // 2 + (1 << 16))
    got = _encode(model, placement)
    kinds = [e.kind for e in placement.events.events()]
    assert "partial_load" in kinds, kinds
    assert torch.equal(got, reference)

    other = _encoder(seed=1)
    placement.register(other, "next model", family="qwen3-4b")
    placement.place([other], 1)
    events = placement.events.events()
    assert any(e.kind in ("evict", "partial_unload", "unload") and e.model == "qwen3-4b" for e in events), [
        (e.kind, e.model) for e in events
    ]
    assert torch.equal(_encode(model, placement), reference)
