"""Smoke test for bench/alignment.py: its pieces run small, so the script cannot rot."""

from __future__ import annotations

from bench import alignment as ba


def test_layouts_and_copies_report_what_the_docs_quote() -> None:
    out = ba.layouts()
    assert set(out) == {"sd15_fp32", "sd15_fp16", "sdxl_fp16"}
    sd15 = out["sd15_fp16"]["reference_writer_by_data_start_mod_64"]
    assert len(sd15) == 8 and sd15["0"]["64"]["bytes"] > 0.5  # position_ids shifts everything
    copies = ba.streamed_copy(1)
    assert 0 < copies["extra_bytes"] <= 64 * copies["tensors"]
    assert ba.copy_at_load(20, 1)["copies_seconds"] > 0
