"""Smoke test for bench/qwen_image_files.py: the Qwen-Image picture bench's files have the released
files' sizes and key layouts (the project's modules' shapes, checked against the independently
written fixture layouts), are detected as the released files are, and plain fp8 matrices hold
N(0, 1/fan-in) themselves (so a 60-layer forward stays finite)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from bench.qwen_image_files import NAMES, layouts
from bench.random_files import write_random
from core.loading.loader import inspect_for_loading
from tests.fixtures.diffusion_layouts_dit import qwen_image
from tests.fixtures.layouts_encoders import qwen25_vl_7b
from tests.fixtures.layouts_wan_vae import wan21_vae_original
from tests.fixtures.st_files import header_bytes, write_sparse


def test_real_size_layouts_are_the_released_files(tmp_path: Path) -> None:
    dit, text, vae = layouts()
    # the sizes of Comfy-Org's files: 1 byte a parameter (plain fp8), 9.38 GB, 254 MB
    sizes = []
    for layout, name in zip((dit, text, vae), NAMES, strict=True):
        head, data = header_bytes(layout, metadata={"modelspec.title": name.removesuffix(".safetensors")})
        sizes.append(len(head) + data)
    assert [round(s / 1e9, 2) for s in sizes] == [
        20.44,
        9.38,
        0.25,
    ]  # (the writer's files: 20,436,214,424 / 9,384,639,104 / 253,806,286)
    assert set(dit) == set(qwen_image()) and set(vae) == set(wan21_vae_original())
    assert set(qwen25_vl_7b()) <= set(text) and "scaled_fp8" in text
    assert not any(k.endswith("scale_weight") for k in dit)  # plain fp8: a cast, no scales
    assert {d for d, s in dit.values() if len(s) >= 2} == {"F8_E4M3"}
    assert {d for d, s in dit.values() if len(s) == 1} == {"BF16"}
    found = {}
    for part, layout, name in zip(("dit", "text", "vae"), (dit, text, vae), NAMES, strict=True):
        det = inspect_for_loading(write_sparse(tmp_path / name, layout))[1]
        found[part] = (det.kind, det.family)
    assert found == {
        "dit": ("diffusion_model", "qwen-image"),
        "text": ("text_encoder", "qwen2.5-vl-7b"),
        "vae": ("vae", "vae-wan"),
    }


def test_plain_fp8_values_are_scaled_by_fan_in(tmp_path: Path) -> None:
    typed = {
        "a.weight": ("F8_E4M3", (64, 3072)),
        "b.weight": ("F8_E4M3", (64, 12288)),
        "b.bias": ("BF16", (64,)),
    }
    stored = load_file(str(write_random(tmp_path / "plain.safetensors", typed, fp8_block=1 << 16)))
    for key, fan_in in (("a.weight", 3072), ("b.weight", 12288)):
        w = stored[key]
        assert w.dtype == torch.float8_e4m3fn
        assert abs(float(w.float().std()) * math.sqrt(fan_in) - 1) < 0.1
