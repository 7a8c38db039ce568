"""The header benchmark runs end to end on small headers and reports every reader."""

from __future__ import annotations

from bench.header import run


def test_header_bench_smoke() -> None:
    out = run([1000, 3000], 1)
    rows = out["rows"]
    assert [r["tensors"] for r in rows] == [1000, 3000]  # type: ignore[index]
    for row in rows:  # type: ignore[attr-defined]
        assert row["json_loads_s"] > 0 and row["loadout_s"] > 0 and row["safetensors_s"] > 0
        assert row["loadout_vs_json"] > 0
