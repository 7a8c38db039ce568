"""The hash benchmark runs end to end on a small file and reports every method."""

from __future__ import annotations

from pathlib import Path

from bench.hash_throughput import run


def test_hash_bench_smoke(tmp_path: Path) -> None:
    out = run(8, 1, tmp_path)
    warm = out["results"]["warm"]  # type: ignore[index]
    assert set(warm) == {"read", "hashlib", "store", "store_addnet"}
    assert all(v["mb_per_s"] > 0 and v["mb_per_cpu_s"] > 0 for v in warm.values())
    assert out["rss_peak_growth_mib"] < 64  # type: ignore[operator]
    assert list(tmp_path.iterdir()) == []  # the file is removed
