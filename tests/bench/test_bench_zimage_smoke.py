"""Smoke test for bench/zimage_files.py: the picture bench's random files are real fp8-scaled files
that Loadout reads, with weights N(0, 1/fan-in) (so a deep forward stays finite)."""

from __future__ import annotations

import math

import torch
from safetensors.torch import load_file

from bench.load import formatted
from bench.zimage_files import shapes, write_random
from core.loading.loader import load_text_encoder
from core.models.llm import LlmTextModel
from tests.fixtures.llm_files import small_config


def test_random_fp8_scaled_file_loads_with_scaled_weights(tmp_path):
    cfg = small_config("qwen3-4b", layers=1)  # the real width (detection reads it), a small rest
    path = write_random(
        tmp_path / "qwen3-4b_fp8.safetensors", formatted(shapes(LlmTextModel(cfg, device="meta")), "fp8")
    )
    stored = load_file(str(path))
    up = "model.layers.0.mlp.up_proj"
    assert stored[up + ".weight"].dtype == torch.float8_e4m3fn
    assert float(stored[up + ".scale_weight"]) == torch.tensor(1 / math.sqrt(2560)).item()
    assert float(stored["model.norm.weight"].float().mean()) > 0.9  # norms around 1
    loaded = load_text_encoder(path).module
    weight = loaded.model.layers[0].mlp.up_proj.weight.to(torch.float32)  # dequantized: values x scale
    assert abs(float(weight.std()) - 1 / math.sqrt(2560)) < 0.2 / math.sqrt(2560)
    ids = torch.randint(0, cfg.vocab_size, (1, 16))
    with torch.no_grad():
        (hidden,) = loaded(ids, taps=(-1,), dtype=torch.float32)
    assert bool(torch.isfinite(hidden).all())
    mtime = path.stat().st_mtime_ns
    again = write_random(path, formatted(shapes(LlmTextModel(cfg, device="meta")), "fp8"))
    assert again.stat().st_mtime_ns == mtime  # kept
