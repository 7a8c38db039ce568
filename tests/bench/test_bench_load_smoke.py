"""Smoke test for bench/load.py: its pieces run on small or sparse files, so the script cannot rot."""

from __future__ import annotations

import math

from safetensors.torch import load_file

from bench import load as bl
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.st_files import header_bytes, write_sparse


def test_ensure_file_writes_real_finite_fp16_once(tmp_path):
    layout = {"a": (1000,), "b": (3, 700), "c": ()}
    path = bl.ensure_file(tmp_path / "small.safetensors", layout, block_bytes=1024)
    head, data = header_bytes(layout, dtype="F16", metadata={"modelspec.title": "small"})
    assert path.stat().st_size == len(head) + data
    tensors = load_file(str(path))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == layout
    assert all(bool(v.isfinite().all()) for v in tensors.values())
    assert float(tensors["a"].float().std()) > 0.5  # random, not zeros
    mtime = path.stat().st_mtime_ns
    assert bl.ensure_file(path, layout, block_bytes=1024).stat().st_mtime_ns == mtime  # kept

    r = bl.run_method("baseline_load_file_touched", path)
    assert r["tensors_touched"] == 3 and r["bytes_touched"] == data
    assert r["peak_rss_bytes"] > 0 and r["seconds"] >= r["ready_seconds"]


def test_loadout_and_subprocess_driver_on_sparse_sd15(tmp_path):
    # full-size real layout, data area a hole: nothing on disk, nothing touched
    path = write_sparse(tmp_path / "sd15.safetensors", ld.sd1_checkpoint())
    r = bl.run_method("loadout_ready", path)
    assert r["components"] == ["diffusion_model:sd1", "text_encoder:clip-l", "vae:vae-sd"]

    out = bl.bench_file(path, 1, ["baseline_load_file", "loadout_ready"], warm_cache=False)
    assert out["bytes"] == path.stat().st_size
    assert set(out["methods"]) == {"baseline_load_file", "loadout_ready"}
    t = out["targets"]["loadout_ready"]
    assert math.isfinite(t["time_vs_baseline"]) and t["peak_rss_over_file"] > 0
    assert bl.machine("x")["cpus"]


def test_text_encoder_files_in_bf16_and_fp8_scaled_load_as_loadout_reads_them(tmp_path):
    import dataclasses

    import torch

    from core.models.llm import LlmConfig, LlmTextModel

    cfg = dataclasses.replace(LlmConfig.preset("qwen3-4b"), num_layers=1, vocab_size=64)
    shapes = {k: tuple(v.shape) for k, v in LlmTextModel(cfg, device="meta").state_dict().items()}
    fp8 = bl.formatted(shapes, "fp8")
    assert fp8["scaled_fp8"] == ("F8_E4M3", (0,))
    assert fp8["model.layers.0.mlp.up_proj.weight"][0] == "F8_E4M3"
    assert fp8["model.layers.0.mlp.up_proj.scale_weight"] == ("F32", ())
    assert fp8["model.embed_tokens.weight"][0] == "BF16" and fp8["model.norm.weight"][0] == "BF16"
    for fmt in ("bf16", "fp8"):
        path = bl.ensure_file(
            tmp_path / f"qwen3-4b_{fmt}.safetensors", bl.formatted(shapes, fmt), block_bytes=4096
        )
        stored = load_file(str(path))
        assert all(bool(v.float().isfinite().all()) for v in stored.values())
        assert all(float(v) > 0 for k, v in stored.items() if k.endswith("scale_weight"))
        base = bl.run_method("baseline_load_file_touched", path)
        ours = bl.run_method("loadout_ready_touched", path)
        assert ours["components"] == ["text_encoder:qwen3-4b"]
        scales = sum(4 for k in stored if k.endswith("scale_weight"))  # folded into the weights
        assert ours["bytes_touched"] == base["bytes_touched"] - scales
        dtypes = {v.dtype for v in stored.values()}
        assert dtypes == (
            {torch.bfloat16} if fmt == "bf16" else {torch.bfloat16, torch.float8_e4m3fn, torch.float32}
        )
