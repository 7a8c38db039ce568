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
