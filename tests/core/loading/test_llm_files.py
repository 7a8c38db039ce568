"""Qwen3-4B (Z-Image) and Gemma-2-2B (Lumina 2) text-encoder files: detected, checked key by key,
loaded from the memory map, and giving the same hidden states as the network they were written from,
in Comfy-Org's layout (bf16 and fp8-scaled), the bare layout and the VL-nested one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.loading.check import check_file
from core.loading.loader import inspect_for_loading, load_text_encoder
from tests.fixtures.fp8_scaled import write_scaled_fp8
from tests.fixtures.llm_files import model_from, random_state, small_config, write_comfy

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 17, 200, 5, 9, 1, 44]])


def _hidden(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(IDS, None, taps=(-2,), dtype=torch.float32)[0]
    return out


@pytest.mark.parametrize("family", ["qwen3-4b", "gemma2-2b"])
def test_comfy_org_file_is_detected_checked_and_loaded(tmp_path: Path, family: str) -> None:
    cfg = small_config(family)
    state = random_state(cfg)
    spiece = {"spiece_model": torch.frombuffer(bytearray(b"\x0a\x03abc"), dtype=torch.uint8)}
    path = write_comfy(
        tmp_path / "te.safetensors", state, extra=spiece if family.startswith("gemma") else None
    )
    det = inspect_for_loading(path)[1]
    assert (det.kind, det.family) == ("text_encoder", family)
    record = check_file(path)
    assert record["ok"], record
    assert record["components"][0]["unexpected"] == []
    loaded = load_text_encoder(path)
    assert loaded.family == family and loaded.config == cfg
    weight = loaded.module.model.layers[1].mlp.down_proj.weight
    assert weight.dtype == torch.bfloat16  # kept as stored: no copy, no upcast
    reference = model_from(cfg, {k: v.to(torch.bfloat16) for k, v in state.items()})
    assert torch.equal(_hidden(loaded.module), _hidden(reference))


@pytest.mark.parametrize("base, layout", [("", "bare"), ("model.language_model.", "transformers-vl")])
def test_other_layouts_load_as_the_same_network(tmp_path: Path, base: str, layout: str) -> None:
    cfg = small_config("qwen3-4b")
    state = random_state(cfg, seed=1)
    extra = {"lm_head.weight": torch.zeros(8, 8), "visual.patch_embed.proj.weight": torch.zeros(4, 4)}
    path = write_comfy(tmp_path / "te.safetensors", state, base=base, extra=extra, dtype=torch.float32)
    assert inspect_for_loading(path)[1].layout == layout
    assert check_file(path)["ok"]
    loaded = load_text_encoder(path)
    assert torch.equal(_hidden(loaded.module), _hidden(model_from(cfg, state)))


def test_fp8_scaled_file_stays_fp8_and_matches_its_dequantized_values(tmp_path: Path) -> None:
    cfg = small_config("qwen3-4b")
    state = random_state(cfg, seed=2)
    written = write_scaled_fp8(tmp_path / "qwen_3_4b_fp8_scaled.safetensors", state)
    path = tmp_path / "qwen_3_4b_fp8_scaled.safetensors"
    det = inspect_for_loading(path)[1]
    assert det.family == "qwen3-4b"
    assert check_file(path)["ok"]
    loaded = load_text_encoder(path)
    assert _hidden(loaded.module).shape == (1, 7, cfg.hidden_size)
    reference = model_from(cfg, written.values(torch.float32))
    torch.testing.assert_close(_hidden(loaded.module), _hidden(reference), rtol=1e-5, atol=1e-5)


def test_a_file_missing_a_layer_weight_fails_the_check(tmp_path: Path) -> None:
    cfg = small_config("gemma2-2b")
    state = random_state(cfg)
    del state["model.layers.1.post_feedforward_layernorm.weight"]
    path = write_comfy(tmp_path / "gemma.safetensors", state)
    record = check_file(path)
    assert not record["ok"]
    assert record["components"][0]["missing"] == ["model.layers.1.post_feedforward_layernorm.weight"]
